// ObjectManager: moves objects between nodes' shared-memory stores, after Ray's object
// manager (src/ray/object_manager, pull-based): a node that needs an object it lacks
// *pulls* it from nodes that have it, in chunks, straight into its own store.
//
//  - Serving: READ_OBJECT_CHUNK {object, offset, length} is answered with the object's
//    size and those bytes, sent from the store with no copy (a raw tail: rpc/buffers.h);
//    the object is pinned in the local store until the connection has written them (a
//    spilled object is restored first). NOT_FOUND when this node has no sealed copy.
//  - Pulling: Pull(id, sources, done) allocates the object in the local store (admission:
//    it waits for room, never overcommits; fails at once only when the object can never
//    fit), reads it from the first source that answers, `chunks_in_flight` chunks of
//    `chunk_bytes` at a time, from the socket straight into the allocated memory
//    (rpc::CallInto), and seals it. A source that
//    fails (its connection closes, it answers NOT_FOUND or with bytes that do not fit)
//    is left for the next one, which reads the chunks not received yet. Concurrent pulls
//    of one object share one transfer. The copy is *secondary* (CopyKind::kSecondary):
//    unpinned once sealed, evicted (not spilled) when the store needs room, removed by
//    ObjectStoreService::DeleteObject.
//
// docs/design/object_transfer.md has the protocol, the admission rule and the figures.
//
// Threading: lives on the node daemon's loop (`io`): every method, and every callback,
// runs there. Connecting to a peer may block (ConnectionPool::Get, up to the factory's
// connect timeout), so connects run on a thread of the manager's own
// ("object-manager-connect"), which posts the connection back to the loop; a peer already
// connected is used at once.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "raio/common.pb.h"
#include "raio/common/event_loop.h"
#include "raio/internal/object_id.h"
#include "raio/node/object_store_service.h"
#include "raio/rpc/connection_pool.h"
#include "raio/rpc/service.h"

namespace raio::node {

class ObjectManager {
 public:
  // The most bytes one READ_OBJECT_CHUNK may ask for (and the bound of
  // config::object_transfer_chunk_bytes): far below one frame (config::kMaxFrameBytes).
  static constexpr uint64_t kMaxChunkBytes = 64ull << 20;

  struct Options {
    // Opens connections to other nodes (tests inject their own). Required.
    std::shared_ptr<rpc::ConnectionFactory> connection_factory;
    // 0: config::object_transfer_chunk_bytes() / object_transfer_chunks_in_flight(),
    // read when a transfer starts.
    uint64_t chunk_bytes = 0;
    int chunks_in_flight = 0;
  };

  // Counters, for tests and `raio status`.
  struct Stats {
    uint64_t transfers_started = 0;  // pulls that started a transfer
    uint64_t pulls_merged = 0;       // pulls that joined a transfer already under way
    uint64_t transfers_succeeded = 0;
    uint64_t transfers_failed = 0;
    uint64_t source_failures = 0;  // sources given up on mid-pull
    uint64_t chunks_requested = 0;
    uint64_t bytes_received = 0;
    uint64_t chunks_served = 0;
    uint64_t bytes_served = 0;
  };

  // OK once the object is sealed in the local store; else the error (see Pull).
  using PullCallback = std::function<void(const absl::Status&)>;

  // `store` must outlive the manager. Call on the loop thread.
  ObjectManager(boost::asio::io_context& io, ObjectStoreService& store, Options options);
  // Stop()s. On the loop thread.
  ~ObjectManager();
  ObjectManager(const ObjectManager&) = delete;
  ObjectManager& operator=(const ObjectManager&) = delete;

  // Adds READ_OBJECT_CHUNK to `service` (the node's TCP-facing service); `this` must
  // outlive the service's connections' use of it.
  void RegisterHandlers(rpc::Service& service);

  // Makes object `id` readable in the local store by copying it from one of `sources`
  // (nodes that have it, tried in order; their ip:port is used). `done` runs once, on the
  // loop (never inline): OK when the object is sealed here (at once when it already is);
  // ResourceExhausted when it is larger than this node's store; NotFound (every source
  // answered NOT_FOUND) or Unavailable (otherwise) when every source failed, with a
  // message naming the object and each source's failure (callers report ObjectLostError);
  // Cancelled when the manager stops first. A pull of an object already being pulled
  // joins that transfer (its new sources are added to the end of the list).
  void Pull(const ObjectId& id, std::vector<proto::Address> sources, PullCallback done);

  // Fails every pull with Cancelled, drops their half-written copies, closes the
  // connections to other nodes and joins the connect thread. Later pulls fail with
  // Cancelled. Idempotent.
  void Stop();

  const Stats& stats() const { return stats_; }
  // Transfers under way (waiting for room included).
  std::size_t num_active_pulls() const { return pulls_.size(); }
  // Of those, how many wait for room in the local store.
  std::size_t num_waiting_for_room() const;

 private:
  struct Transfer;  // one object's pull, shared by every Pull() of it
  using PullPtr = std::shared_ptr<Transfer>;
  struct Chunk {
    uint64_t offset = 0;
    uint64_t length = 0;
  };

  void ServeChunk(const rpc::Responder<proto::READ_OBJECT_CHUNK>& r,
                  const proto::ReadObjectChunkRequest& req);
  // A keep-alive that holds one of the node's pins on `id` (taken by the caller) and drops
  // it, on the loop, when released.
  std::shared_ptr<const void> HoldPin(const ObjectId& id);

  // Moves `p` to its next untried source (connecting first), or fails it.
  void NextSource(const PullPtr& p);
  void Connect(const PullPtr& p);
  void OnConnected(const PullPtr& p, uint64_t generation,
                   absl::StatusOr<std::shared_ptr<rpc::Connection>> conn);
  // Asks the current source for the first chunk, which tells the object's size.
  void Probe(const PullPtr& p);
  void OnProbeReply(const PullPtr& p, uint64_t generation,
                    const absl::StatusOr<std::string_view>& body);
  void OnCreated(const PullPtr& p, absl::StatusOr<ObjectLocation> location);
  // Keeps chunks_in_flight chunk reads outstanding on the current source.
  void IssueChunks(const PullPtr& p);
  // Reads `chunk` from the current source into the allocated object.
  void ReadChunk(const PullPtr& p, Chunk chunk);
  void OnChunkReply(const PullPtr& p, uint64_t generation, Chunk chunk,
                    const absl::StatusOr<rpc::IntoReply<proto::ReadObjectChunkReply>>& reply);
  // The current source failed: remember why and move on.
  void SourceFailed(const PullPtr& p, const absl::Status& why);
  void Succeed(const PullPtr& p);
  // Fails `p`; it finishes once none of its reads is outstanding (FinishFailureIfDrained).
  void Fail(const PullPtr& p, absl::Status status);
  void FinishFailureIfDrained(const PullPtr& p);
  void Finish(const PullPtr& p, const absl::Status& status);

  // `f` runs on the loop unless the manager is gone by then.
  template <typename F>
  void PostGuarded(F f);

  boost::asio::io_context& io_;
  ObjectStoreService& store_;
  const Options options_;
  rpc::ConnectionPool pool_;
  EventLoop connect_loop_{"object-manager-connect"};
  std::unordered_map<ObjectId, PullPtr, ObjectId::Hasher> pulls_;
  Stats stats_;
  bool stopped_ = false;
  // Callbacks that may run after the manager is gone (posted closures, replies on pooled
  // connections) hold a weak_ptr to this and do nothing once it has expired.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace raio::node
