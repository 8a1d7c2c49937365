// StoreClient: a driver's or worker's access to its node's shared-memory object store.
// Maps the store's memory once, from the descriptor the node passed when this process
// connected (there is no file to open; see node/object_store/shm_region.h); creates objects by RPC
// to the node and writes them through the mapping (one copy), and reads sealed objects in place:
// Get pins the object and returns a view whose keeper unpins it when the last copy goes.
//
// Every object in the store starts with a 64-byte header (magic, format, dtype, payload
// size) so that it describes itself, also after a spill; the payload follows at a
// 64-byte aligned offset, so arrays can be viewed in place.
//
// Threading: thread-safe, but the blocking calls (Put, Get) must not run on the node
// connection's loop thread. Views stay valid after the StoreClient is destroyed (they
// share the mapping).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/common/ids.h"
#include "raio/common/unique_fd.h"
#include "raio/node.pb.h"
#include "raio/rpc/connection.h"
#include "raio/serialization.h"

namespace raio::worker {

class StoreClient {
 public:
  static constexpr uint64_t kHeaderBytes = 64;

  // Maps the store's memory `store_fd` (`size_bytes` long, as the node's registration
  // reply says) read/write, then closes `store_fd` (the mapping keeps the memory).
  // `node` is the connection for the store's RPCs. Errors: InvalidArgument (no
  // descriptor, size 0, or a descriptor that is not a memory file of at least
  // `size_bytes`: mapping past its end would SIGBUS on touch), Unavailable (mmap
  // failed; errno's text). Does not block.
  static absl::StatusOr<std::unique_ptr<StoreClient>> Create(std::shared_ptr<rpc::Connection> node,
                                                             UniqueFd store_fd,
                                                             uint64_t size_bytes);

  // The largest payload one object can have: the store's capacity less the header. Every
  // object above it is refused by Put without asking the node.
  uint64_t max_object_bytes() const;

  // Creates object `id` owned by `owner`, copies `size` bytes of `data` into it and seals
  // it. ResourceExhausted (above max_object_bytes(), or store full; the message gives the
  // sizes), AlreadyExists, or Unavailable (node gone). Blocks for two RPCs and the copy.
  absl::Status Put(const ObjectId& id, const WorkerId& owner, internal::ValueFormat format,
                   internal::DType dtype, const void* data, uint64_t size);
  // Pins a sealed object and returns a view of its payload; the view's keeper unpins it.
  // NotFound, FailedPrecondition (not sealed), ResourceExhausted (cannot restore a
  // spilled object), DataLoss (bad header), Unavailable.
  absl::StatusOr<internal::ValueView> Get(const ObjectId& id);
  // Pins all of `ids` at once, or none (a task's arguments, PIN_OBJECTS): waits, without a
  // timeout, while the store has no room for them now; ResourceExhausted at once when
  // they can never fit together (the message gives the sizes and the capacity); else as
  // Get. Views in the order of `ids`. Blocks.
  absl::StatusOr<std::vector<internal::ValueView>> GetAll(const std::vector<ObjectId>& ids);
  // Tells the node the owner freed the object (one-way).
  void Delete(const ObjectId& id);
  // Makes the objects of `request` readable in this node's store (PULL_OBJECTS): the node
  // copies each one it lacks from one of its sources (other nodes holding a copy; see
  // node/object_manager). Blocks until all are here, without a deadline (a transfer takes
  // what its size takes; a source that dies fails over to the next). Errors: NotFound or
  // Unavailable (no source could deliver it; the message names the object and each
  // source's failure), ResourceExhausted (larger than this node's store), Unavailable
  // (the node is gone).
  absl::Status Pull(const proto::PullObjectsRequest& request);

  ~StoreClient();

 private:
  struct Mapping;
  StoreClient(std::shared_ptr<rpc::Connection> node, std::shared_ptr<Mapping> mapping)
      : node_(std::move(node)), mapping_(std::move(mapping)) {}

  // A view of the pinned object `id` at `offset`, `size` bytes long; its keeper unpins it.
  absl::StatusOr<internal::ValueView> ViewPinned(const ObjectId& id, uint64_t offset,
                                                 uint64_t size);

  std::shared_ptr<rpc::Connection> node_;
  std::shared_ptr<Mapping> mapping_;
};

}  // namespace raio::worker
