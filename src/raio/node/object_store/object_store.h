// ObjectStore: the node's shared-memory object store, after Plasma (Ray's object
// store). Objects are created unsealed by one client (a connected process), filled in
// place through the shared mapping, sealed (immutable from then on) and pinned by
// readers. Memory comes from one pre-faulted region (see ShmRegion) managed by a
// first-fit, lowest-offset-first Allocator, so new objects reuse warm memory.
//
// Under memory pressure, CreateObject and Pin make room by:
//   1. evicting restored copies (objects read back from a spill file that still
//      exists and that no one pins): their memory is simply freed; and evicting
//      secondary copies (objects pulled from another node, which still has the primary;
//      CopyKind::kSecondary) that no one pins: they are forgotten altogether, as if
//      deleted, and a later reader pulls them again;
//   2. spilling sealed, unpinned objects, least recently used first: their bytes go
//      to `spill_dir`/<hex id> and their memory is freed.
// Pinned and unsealed objects are never moved. A spilled object is restored when it is
// pinned; the restored copy keeps its spill file, so evicting it again costs nothing.
// Before moving anything the store checks that the request can fit once everything
// movable is gone, so a hopeless request spills nothing.
//
// Threading: not thread-safe. All calls come from one thread (the node daemon's event
// loop); the only other thread is the region's internal prefault thread, which touches
// no bookkeeping. Spilling and restoring run synchronously inside CreateObject and Pin
// and block that thread on disk I/O; a later change may move them to a pool.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/internal/object_id.h"
#include "raio/node/object_store/allocator.h"
#include "raio/node/object_store/shm_region.h"

namespace raio::node {

// Where an object's bytes are: `size` bytes at `offset` from the start of the shared
// region (offset is a multiple of 64). A size-0 object has offset 0, size 0.
struct ObjectLocation {
  uint64_t offset = 0;
  uint64_t size = 0;
  bool operator==(const ObjectLocation&) const = default;
};

// A connected process (driver or worker); chosen by the caller, opaque here.
using ClientId = uint64_t;

// Whether the store holds an object's only copy on this node (kPrimary: made here, or
// the owner's copy; spilled under pressure) or a copy of an object whose primary is on
// another node (kSecondary: pulled by the object manager; evicted under pressure, never
// spilled).
enum class CopyKind { kPrimary, kSecondary };

enum class ObjectState {
  kUnsealed,  // being written by its creator; in memory
  kSealed,    // immutable and in memory (possibly a restored copy of a spill file)
  kSpilled,   // only in its spill file
};
const char* ObjectStateName(ObjectState state);  // "unsealed", "sealed", "spilled"

struct ObjectStoreStats {
  uint64_t capacity_bytes = 0;  // the region's size (capacity rounded up to a page)
  uint64_t used_bytes = 0;      // allocated in the region, 64-byte padding included
  uint64_t pinned_bytes = 0;    // allocated to pinned objects
  uint64_t num_objects = 0;     // every object the store knows, spilled ones included
  uint64_t num_spilled = 0;     // objects only on disk
  uint64_t spilled_bytes = 0;   // their sizes
  uint64_t num_evictable = 0;   // unpinned in-memory copies: restored or secondary
};

// One row of `raio list objects`.
struct ObjectInfo {
  ObjectId id;
  uint64_t size = 0;
  ObjectState state = ObjectState::kUnsealed;
  uint64_t num_pins = 0;        // summed over clients
  bool has_spill_file = false;  // true for spilled objects and restored copies
  bool delete_pending = false;  // deleted by the owner, waiting for the last Unpin
  CopyKind kind = CopyKind::kPrimary;
};

class ObjectStore {
 public:
  struct Options {
    uint64_t capacity_bytes = 0;
    // Where spill files go; must exist. Empty: spilling is off, and a full store
    // refuses new objects (restored copies can still be evicted, but there are none).
    std::string spill_dir;
    // Pre-fault the region in the background (off only to save time in tests that
    // map large regions they never touch).
    bool prefault = true;
    // Pre-fault only the first this-many bytes (allocation reuses low offsets first).
    uint64_t prefault_bytes = UINT64_MAX;
  };

  // Creates the region (see ShmRegion::Create for the memory file, mapping and
  // pre-faulting) and an empty store. Errors: InvalidArgument (capacity 0, spill_dir not
  // a directory), ResourceExhausted (capacity above the machine's memory), Internal
  // (memfd or mmap failure, with errno's text). Does not wait for pre-faulting.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ObjectStore>> Create(Options options);
  // Stops the prefault thread, unmaps the region, closes its descriptor and removes
  // every spill file this store wrote.
  ~ObjectStore();
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  // The region's descriptor (owned by the store); clients receive copies of it and mmap
  // them read/write, MAP_SHARED, at the region's full size.
  int shm_fd() const { return region_->fd(); }
  // The store's own mapping of the region, valid for the store's lifetime.
  uint8_t* base() { return region_->base(); }
  const ShmRegion& region() const { return *region_; }

  // Allocates `size` bytes (0 allowed) for a new unsealed object created and pinned
  // (once) by `client`, making room by eviction and spilling if needed (see the top
  // comment; blocks on spill writes). Errors: AlreadyExists if `id` is known;
  // ResourceExhausted, giving the requested size, the capacity, bytes in use and bytes
  // pinned, if it cannot fit even after moving everything movable; Internal if a spill
  // write failed (the objects spilled before it stay spilled). `kind`: see CopyKind.
  [[nodiscard]] absl::StatusOr<ObjectLocation> CreateObject(const ObjectId& id, uint64_t size,
                                                            ClientId client,
                                                            CopyKind kind = CopyKind::kPrimary);
  // Makes the object immutable. NotFound if unknown; FailedPrecondition if sealed.
  [[nodiscard]] absl::Status Seal(const ObjectId& id);
  // Pins a sealed object for `client` (counted: a client may pin several times; each
  // pin needs one Unpin) and returns where it is. A spilled object is first read back
  // (allocating as CreateObject does, which may evict or spill others; blocks on disk
  // I/O). Errors: NotFound if unknown or deleted; FailedPrecondition if not sealed;
  // ResourceExhausted if there is no room to restore it; Internal/DataLoss if its
  // spill file cannot be read (the object stays spilled).
  [[nodiscard]] absl::StatusOr<ObjectLocation> Pin(const ObjectId& id, ClientId client);
  // Drops one of `client`'s pins on `id`. Unknown ids and clients that hold no pin are
  // ignored.
  void Unpin(const ObjectId& id, ClientId client);
  // The owner freed the object: removes it (memory and spill file) now if no one pins
  // it, else at the last Unpin; meanwhile new Pins get NotFound. Unknown ids ignored.
  void Delete(const ObjectId& id);
  // `client` went away: drops all its pins and removes the unsealed objects it created.
  // Linear in the number of objects.
  void DisconnectClient(ClientId client);

  ObjectStoreStats stats() const;
  // Every object, ordered by id.
  std::vector<ObjectInfo> List() const;
  // The payload size in bytes of object `id` (sealed, unsealed or spilled); nullopt when
  // unknown.
  std::optional<uint64_t> SizeOf(const ObjectId& id) const;
  // The state of object `id`; nullopt when unknown or deleted (waiting for its last Unpin).
  std::optional<ObjectState> StateOf(const ObjectId& id) const;
  uint64_t capacity_bytes() const { return allocator_.capacity(); }

 private:
  struct Entry {
    uint64_t size = 0;
    ObjectState state = ObjectState::kUnsealed;
    uint64_t offset = 0;     // valid while in memory
    bool allocated = false;  // owns a block in the allocator (in memory, size > 0)
    ClientId creator = 0;
    std::unordered_map<ClientId, uint64_t> pins;
    uint64_t num_pins = 0;
    bool has_spill_file = false;
    bool delete_pending = false;
    bool in_lru = false;  // sealed, allocated and unpinned: may be evicted or spilled
    CopyKind kind = CopyKind::kPrimary;
    std::list<ObjectId>::iterator lru_it;
  };
  using EntryMap = std::unordered_map<ObjectId, Entry, ObjectId::Hasher>;

  ObjectStore(Options options, std::unique_ptr<ShmRegion> region);

  // Finds a block of `size` bytes, evicting/spilling as described above.
  absl::StatusOr<uint64_t> Allocate(const ObjectId& id, uint64_t size);
  // Whether `size` bytes would fit in one block once every movable object is gone.
  bool FitsAfterReclaim(uint64_t size) const;
  bool Movable(const Entry& e) const;
  absl::Status Spill(const ObjectId& id, Entry& e);
  void FreeMemory(Entry& e);
  // Puts `e` in the LRU list (at the most recent end) or takes it out, to match its
  // state and pins.
  void UpdateLru(const ObjectId& id, Entry& e);
  // Drops `count` pins of `client` (all of them if count is 0); removes the object if
  // that released a pending delete. Returns true if the entry was erased.
  bool DropPins(EntryMap::iterator it, ClientId client, uint64_t count);
  void Remove(EntryMap::iterator it);
  std::string SpillPath(const ObjectId& id) const;
  uint64_t PinnedBytes() const;

  const Options options_;
  std::unique_ptr<ShmRegion> region_;
  Allocator allocator_;
  EntryMap objects_;
  std::list<ObjectId> lru_;  // least recently used at the front
};

}  // namespace raio::node
