// ObjectStoreService: the node daemon's RPC face of its shared-memory ObjectStore.
// Serves CREATE/SEAL/PIN/UNPIN/DELETE/LIST_OBJECTS from local drivers and workers,
// tracks which worker owns each object, and cleans up after peers that go away: their
// pins and unsealed objects, and every object owned by a departed owner (remembering, for
// a while, whose death deleted it: PIN_OBJECT then fails with ABORTED naming that owner).
// The node itself (its object manager: copies it pulls from other nodes, chunks it serves
// to them) uses the store through the *ForNode methods, as client kNodeClient.
// Threading: not thread-safe; lives on the node daemon's loop.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/common/ids.h"
#include "raio/node.pb.h"
#include "raio/node/object_store/object_store.h"
#include "raio/rpc/connection.h"
#include "raio/rpc/service.h"

namespace raio::node {

class ObjectStoreService {
 public:
  // Creates the store: `capacity_bytes` of shared memory (a memory file, no name in any
  // file system; see ShmRegion), spill files under
  // `spill_dir` (created), the first `prefault_bytes` pre-faulted in the background.
  static absl::StatusOr<std::unique_ptr<ObjectStoreService>> Create(uint64_t capacity_bytes,
                                                                    const std::string& spill_dir,
                                                                    uint64_t prefault_bytes);

  // Which client (driver or worker) a connection is, for pins and unsealed objects.
  using ClientOf = std::function<ClientId(const rpc::Connection&)>;
  // Adds the store's methods (CREATE/SEAL/PIN/PIN_OBJECTS/UNPIN/DELETE/LIST_OBJECTS) to
  // `service`; the handlers reply on the caller's connection. `this` must outlive it.
  void RegisterHandlers(rpc::Service& service, ClientOf client_of);
  // A peer disconnected: drop its pins and unsealed objects; if it owned objects
  // (`owner` not nil), delete them.
  void OnPeerGone(ClientId client, const WorkerId& owner);
  // Fails waiting CREATE_OBJECT requests whose wait is over; call periodically.
  void ExpireWaiting() { RetryPendingPins(); }

  // --- The node's own use of its store (the object manager) ---
  // The client id of the node itself, for the pins and objects it makes; never a
  // connected process's (NodeManager numbers those from 1 up).
  static constexpr ClientId kNodeClient = ~ClientId{0};
  using CreateCallback = std::function<void(absl::StatusOr<ObjectLocation>)>;
  // Allocates `size_bytes` for a new unsealed object `id` of the node's (pinned by
  // kNodeClient until SealForNode; no owner: it is deleted only by DeleteObject or, as a
  // secondary copy, evicted once sealed). When the store has no room now but could have
  // (pinned objects fill it), waits without a deadline, in line with waiting
  // CREATE_OBJECT requests, retried after every unpin, delete, seal and disconnect.
  // `done` runs exactly once on the loop, with the location or: ResourceExhausted at once
  // when the object is larger than the store (it can never fit), AlreadyExists when `id`
  // is known, Internal when a spill write failed. It runs inline when decided at once,
  // else later from inside another store call; a `done` that does much should post.
  void CreateForNode(const ObjectId& id, uint64_t size_bytes, CopyKind kind, CreateCallback done);
  // Drops a CreateForNode of `id` that waits for room; its `done` never runs. No-op when
  // none waits.
  void CancelCreateForNode(const ObjectId& id);
  // Seals an object made by CreateForNode and drops the node's pin on it. Errors: as
  // ObjectStore::Seal.
  [[nodiscard]] absl::Status SealForNode(const ObjectId& id);
  // Removes an unsealed object made by CreateForNode (its transfer failed).
  void AbortCreateForNode(const ObjectId& id);
  // Pins a sealed object for the node (restoring it if spilled; may block on disk I/O) and
  // says where it is. Errors: NotFound (unknown, deleted, or not sealed yet), ABORTED
  // (deleted with its dead owner), ResourceExhausted (no room to restore it),
  // Internal/DataLoss (its spill file cannot be read).
  [[nodiscard]] absl::StatusOr<ObjectLocation> PinForNode(const ObjectId& id);
  // Drops one of the node's pins on `id` (then retries waiting requests: room may be made).
  void UnpinForNode(const ObjectId& id);
  // Deletes `id` as its owner's DELETE_OBJECT does (at the last unpin if pinned). Unknown
  // ids are ignored.
  void DeleteObject(const ObjectId& id);
  // Whether `id` is here and sealed (in memory or spilled: a pin restores it).
  bool HasSealed(const ObjectId& id) const;
  // The store's own mapping of its memory (valid for the service's lifetime), to write
  // objects made by CreateForNode and read pinned ones at their ObjectLocation.
  uint8_t* shm_base() { return store_->base(); }
  ObjectStoreStats stats() const { return store_->stats(); }
  std::vector<ObjectInfo> ListInfo() const { return store_->List(); }

  // The store's memory, for clients to map (they receive copies over the node socket).
  int shm_fd() const { return store_->shm_fd(); }
  uint64_t capacity_bytes() const { return store_->region().size(); }
  void FillStats(proto::ObjectStoreStats* stats) const;
  // The node's id (hex), put into List()'s entries.
  void set_node_id(std::string hex) { node_id_hex_ = std::move(hex); }
  proto::ObjectList List() const;

 private:
  // A CREATE_OBJECT request waiting for room, until `deadline`; or the node's own
  // CreateForNode (no `conn`; `done` instead of a reply; no deadline).
  struct PendingCreate {
    std::shared_ptr<rpc::Connection> conn;
    rpc::FrameHeader header;
    ClientId client = 0;
    proto::CreateObjectRequest request;
    std::chrono::steady_clock::time_point deadline;
    CreateCallback done;
    CopyKind kind = CopyKind::kPrimary;
  };
  // A PIN_OBJECTS request waiting for room.
  struct PendingPins {
    std::shared_ptr<rpc::Connection> conn;
    rpc::FrameHeader header;
    ClientId client = 0;
    std::vector<ObjectId> ids;
    std::chrono::steady_clock::time_point since;
    bool warned = false;
  };

  explicit ObjectStoreService(std::unique_ptr<ObjectStore> store) : store_(std::move(store)) {}
  void Delete(const ObjectId& id);
  // The error for a failed Pin of `id`: ABORTED naming the dead owner when its owner's
  // death deleted it, else `status`.
  absl::Status PinError(const ObjectId& id, const absl::Status& status) const;
  // Pins all of `p.ids` or none and replies; false (nothing pinned, no reply) when they
  // do not fit now but may later.
  bool TryPinAll(PendingPins& p);
  // Retries waiting PIN_OBJECTS and CREATE_OBJECT requests in order (room may have been
  // made); creates past their deadline fail with the store's figures.
  void RetryPendingPins();
  // Creates the object and replies; false (no reply) when there is no room now but the
  // request may wait for it (`final`: fail instead).
  bool TryCreate(PendingCreate& p, bool final);

  std::unique_ptr<ObjectStore> store_;
  std::string node_id_hex_;
  std::map<WorkerId, std::set<ObjectId>> owned_;
  std::map<ObjectId, WorkerId> owner_of_;
  // Objects deleted because their owner died, with that owner, the latest
  // kMaxRememberedDeadOwnerObjects of them: PIN_OBJECT of one fails with ABORTED naming the
  // owner (readers report OwnerDiedError), instead of NOT_FOUND.
  static constexpr std::size_t kMaxRememberedDeadOwnerObjects = 1 << 16;
  std::map<ObjectId, WorkerId> dead_owner_of_;
  std::deque<ObjectId> dead_order_;
  std::deque<PendingPins> pending_pins_;
  std::deque<PendingCreate> pending_creates_;
};

}  // namespace raio::node
