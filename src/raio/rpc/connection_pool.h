// Peer addresses and the one pool of connections to peers.
//
// A peer (a driver's or worker's owner service, a worker's executor, a node daemon) is
// named by a proto::Address: ip and port (its TCP endpoint; port 0: none), the node it
// runs on, its worker id, and, for peers on that node only, a Unix socket path. Whether
// the Unix socket is used is decided by comparing the peer's node id with this process's
// (never by looking at paths); addresses sent to another host must carry a routable ip.
//
// ConnectionPool keeps one open connection per peer endpoint, made on first use by an
// injectable ConnectionFactory (tests inject in-process peers; later TLS and fault
// injection wrap the default). Connections it hands out are started; their requests from
// the peer are refused (peers reply, they do not call back on these connections).
//
// Threading: thread-safe. Get() may block (a connect); never call it holding a lock that
// the pool's loop thread takes (the CoreWorker's mutex: see worker/outbox.h). Close
// handlers run on the loop thread, without the pool's lock.
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/common.pb.h"
#include "raio/common/mutex.h"
#include "raio/rpc/connection.h"

namespace raio::rpc {

// "worker 1a2b.. on node 3c4d.. at 10.0.0.5:4100" (or "at unix:PATH"), for messages.
std::string DescribeAddress(const proto::Address& address);
// Parses an Address serialized with SerializeAsString (as ObjectRefs carry their owner's);
// an empty or malformed string gives an empty Address.
proto::Address ParseAddress(std::string_view encoded);

// Opens connections to peers.
class ConnectionFactory {
 public:
  virtual ~ConnectionFactory() = default;
  // A connection to `to` on `io`, not yet started. Blocks for at most the connect
  // timeout. Errors: Unavailable (nothing listens there, or it is on another node and
  // has no TCP endpoint), InvalidArgument (the address names no endpoint).
  virtual absl::StatusOr<std::shared_ptr<Connection>> Connect(boost::asio::io_context& io,
                                                              const proto::Address& to) = 0;
};

// Connects over the peer's Unix socket when it runs on `local_node_id` (8-byte NodeId)
// and has one; over TCP to ip:port otherwise, within `connect_timeout`.
std::shared_ptr<ConnectionFactory> MakeSocketConnectionFactory(
    std::string local_node_id, std::chrono::milliseconds connect_timeout);

class ConnectionPool {
 public:
  // Runs on the loop thread when a pooled connection closes; compare `conn` with the
  // connections you hold to know whether it was yours.
  using CloseHandler =
      std::function<void(const std::shared_ptr<Connection>& conn, const absl::Status& why)>;

  ConnectionPool(boost::asio::io_context& io, std::shared_ptr<ConnectionFactory> factory);
  ~ConnectionPool();

  // Adds a close handler. The pool's destructor drops them: none runs after it.
  void OnClose(CloseHandler handler);
  // The open connection to `to`, connecting first when there is none or it closed.
  // Blocks while connecting. Errors: the factory's.
  absl::StatusOr<std::shared_ptr<Connection>> Get(const proto::Address& to);
  // The open connection to `to`, or null without connecting.
  std::shared_ptr<Connection> Find(const proto::Address& to) const;
  // Closes every connection with `why`; later Gets connect anew.
  void CloseAll(const absl::Status& why);
  std::size_t size() const;

 private:
  // One connection per endpoint: the address's serialized bytes.
  static std::string KeyOf(const proto::Address& to) { return to.SerializeAsString(); }

  // Shared with the connections' close callbacks, which may run after the pool is gone.
  struct State {
    raio::Mutex mu;
    std::unordered_map<std::string, std::shared_ptr<Connection>> conns ABSL_GUARDED_BY(mu);
    std::vector<CloseHandler> close_handlers ABSL_GUARDED_BY(mu);
  };

  boost::asio::io_context& io_;
  const std::shared_ptr<ConnectionFactory> factory_;
  const std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace raio::rpc
