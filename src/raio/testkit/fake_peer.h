// FakePeer: the server end of raio's RPC for unit tests (Ray's fake raylet and worker
// clients are the model, moved one level down: to the socket). Code under test talks to
// a FakePeer over a real rpc::Connection, either one end of a socketpair (Connect()) or a
// Unix or TCP listener (ListenUnix, ListenTcp). Every request and one-way frame it gets is
// recorded, in arrival order, in its own log and in a CallLog the test may share between
// fakes, and waits in a queue until the test answers it: Ok, Error, or Drop (close the
// connection it came on, as a peer that crashes before replying). Only methods the test
// chose with AutoReply are answered by themselves. So the test decides the order and
// the outcome of every reply; on a SteppedLoop also when it is read.
//
// Why the socket and not a client interface: the submitters hold an
// rpc::Connection, not a client class, and find workers by the socket path in a lease
// reply; a fake server needs no change to them, keeps the transport (framing, close,
// timeouts) in what is tested, and plugs in at the two places the product already has:
// the node connection a component is given and the address a reply names.
//
// Thread-safety: thread-safe. Frames arrive on the io_context's thread; Take, Ok, Error
// and Drop may come from any thread (a fake on a threaded EventLoop, whose clients block,
// is waited for with WaitForCall).
#pragma once

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <concepts>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "raio/common/mutex.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/methods.h"
#include "raio/rpc/service.h"

namespace raio::testkit {

// The frames several fakes received, in the order they arrived, as "<peer> <METHOD>"
// ("node REQUEST_WORKER_LEASE"), to assert a whole interleaving at once.
class CallLog {
 public:
  void Add(std::string entry);
  std::vector<std::string> entries() const;
  // The entries so far, which are then forgotten.
  std::vector<std::string> Take();

 private:
  mutable raio::Mutex mu_;
  std::vector<std::string> entries_ ABSL_GUARDED_BY(mu_);
};

// One frame a fake received and the test has not answered yet.
struct ReceivedFrame {
  rpc::FrameHeader header;
  std::string body;
  std::shared_ptr<rpc::Connection> conn;
};

// A request of method M, parsed, with what answers it.
template <proto::Method M>
struct Received {
  using Request = typename rpc::MethodTraits<M>::Request;
  using Reply = typename rpc::MethodTraits<M>::Reply;

  Request request;
  rpc::Responder<M> responder;

  void Ok(const Reply& reply = Reply()) const { responder.Ok(reply); }
  void Error(const absl::Status& status) const { responder.Error(status); }
  // Closes the connection the request came on (the caller's pending calls on it fail).
  void Drop() const { responder.conn()->Close(absl::UnavailableError("dropped by the test")); }
};

class FakePeer {
 public:
  // `name` prefixes its CallLog entries; `log` may be null and must outlive the fake.
  FakePeer(std::string name, boost::asio::io_context& io, CallLog* log = nullptr);
  // Closes every connection and stops listening.
  virtual ~FakePeer();
  FakePeer(const FakePeer&) = delete;
  FakePeer& operator=(const FakePeer&) = delete;

  // A new connection to this fake over a socketpair, started with the given handlers (a
  // caller that also serves requests, as a node serves the head's, passes its own).
  std::shared_ptr<rpc::Connection> Connect(rpc::Connection::RequestHandler on_request = nullptr,
                                           rpc::Connection::CloseHandler on_close = nullptr);
  // Serves every peer that connects to the Unix socket `path` (created; removed on stop).
  absl::Status ListenUnix(const std::string& path);
  // Serves every peer that connects to 127.0.0.1:<port()> (port 0 picks one).
  absl::Status ListenTcp(int port = 0);
  int port() const;
  // Stops accepting (the connections made stay). Idempotent.
  void StopListening();
  // Closes every connection to this fake, as its process dying would.
  void DropConnections();
  int num_connections() const;
  // This fake's server ends of its connections, oldest first (to call the other side).
  std::vector<std::shared_ptr<rpc::Connection>> connections() const;

  // Answers every request of method M at once with `make_reply(request)` (a Reply, or an
  // absl::StatusOr<Reply> whose error is sent as such), or with `reply`. They are still
  // logged, and not queued. Set before the calls come; runs on the io_context's thread.
  template <proto::Method M, typename F>
  requires std::invocable<F&, const typename rpc::MethodTraits<M>::Request&> void AutoReply(
      F make_reply) {
    SetAutoReply(
        M, [make_reply = std::move(make_reply)](const std::shared_ptr<rpc::Connection>& conn,
                                                const rpc::FrameHeader& h, std::string_view body) {
          typename rpc::MethodTraits<M>::Request request;
          if (!request.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
            ADD_FAILURE() << "malformed " << rpc::MethodTraits<M>::kInfo.name << " request";
            return;
          }
          rpc::Responder<M> responder(conn, h);
          using Result = std::decay_t<decltype(make_reply(request))>;
          if constexpr (std::is_same_v<Result, typename rpc::MethodTraits<M>::Reply>) {
            responder.Ok(make_reply(request));
          } else {
            Result result = make_reply(request);
            if (result.ok()) {
              responder.Ok(*result);
            } else {
              responder.Error(result.status());
            }
          }
        });
  }
  template <proto::Method M>
  void AutoReply(
      const typename rpc::MethodTraits<M>::Reply& reply = typename rpc::MethodTraits<M>::Reply()) {
    AutoReply<M>([reply](const auto&) { return reply; });
  }

  // Answers every request of method M at once with the error `status` (logged, not queued).
  template <proto::Method M>
  void AutoReplyError(absl::Status status) {
    SetAutoReply(M, [status = std::move(status)](const std::shared_ptr<rpc::Connection>& conn,
                                                 const rpc::FrameHeader& h, std::string_view) {
      rpc::Responder<M>(conn, h).Error(status);
    });
  }

  // Takes the oldest unanswered frame, which must be a request (or one-way frame) of
  // method M: otherwise the test fails with what was there, and nullopt is returned.
  template <proto::Method M>
  std::optional<Received<M>> Take() {
    std::optional<ReceivedFrame> frame = TakeFrame(M);
    if (!frame) return std::nullopt;
    Received<M> r{{}, rpc::Responder<M>(frame->conn, frame->header)};
    if (!r.request.ParseFromString(frame->body)) {
      ADD_FAILURE() << name_ << ": malformed " << rpc::MethodTraits<M>::kInfo.name << " request";
      return std::nullopt;
    }
    return r;
  }
  // Whether an unanswered frame waits.
  bool HasCall() const;
  // The methods of the unanswered frames, oldest first ("REQUEST_WORKER_LEASE").
  std::vector<std::string> PendingMethods() const;
  // Every frame's method since the start (or the last TakeLog), in arrival order.
  std::vector<std::string> TakeLog();
  // Blocks until an unanswered frame waits or `timeout` times TimeScale() passes (scaled
  // here, as WaitFor does: testkit/time_scale.h); returns HasCall(). For a fake on a
  // threaded loop (a stepped one runs only when the test steps it).
  bool WaitForCall(std::chrono::milliseconds timeout);

  const std::string& name() const { return name_; }
  boost::asio::io_context& io() { return io_; }

 private:
  using FrameHandler = std::function<void(const std::shared_ptr<rpc::Connection>&,
                                          const rpc::FrameHeader&, std::string_view)>;
  // What the connections' handlers reach; they hold it weakly, so that a frame or a close
  // handled after the fake is gone finds nothing.
  struct State;

  void SetAutoReply(proto::Method method, FrameHandler handler);
  std::optional<ReceivedFrame> TakeFrame(proto::Method expected);
  // Starts serving a connection accepted or made by Connect.
  void Serve(std::shared_ptr<rpc::Connection> conn);

  const std::string name_;
  boost::asio::io_context& io_;
  std::shared_ptr<State> state_;
  std::unique_ptr<rpc::Listener> listener_;
};

// The name of method number `method` ("PUSH_TASK"), or "method <n>".
std::string MethodName(uint32_t method);

}  // namespace raio::testkit
