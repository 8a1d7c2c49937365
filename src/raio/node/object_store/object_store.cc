#include "raio/node/object_store/object_store.h"

#include <sys/stat.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/node/object_store/spill_file.h"

namespace raio::node {

const char* ObjectStateName(ObjectState state) {
  switch (state) {
    case ObjectState::kUnsealed:
      return "unsealed";
    case ObjectState::kSealed:
      return "sealed";
    case ObjectState::kSpilled:
      return "spilled";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<ObjectStore>> ObjectStore::Create(Options options) {
  if (options.capacity_bytes == 0) {
    return absl::InvalidArgumentError("object store capacity must be > 0");
  }
  if (!options.spill_dir.empty()) {
    struct stat st {};
    if (stat(options.spill_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("spill_dir is not a directory: ", options.spill_dir));
    }
  }
  absl::StatusOr<std::unique_ptr<ShmRegion>> region =
      ShmRegion::Create(options.capacity_bytes, options.prefault,
                        ShmRegion::kDefaultPrefaultChunkBytes, options.prefault_bytes);
  if (!region.ok()) return region.status();
  return std::unique_ptr<ObjectStore>(new ObjectStore(std::move(options), *std::move(region)));
}

ObjectStore::ObjectStore(Options options, std::unique_ptr<ShmRegion> region)
    : options_(std::move(options)), region_(std::move(region)), allocator_(region_->size()) {}

ObjectStore::~ObjectStore() {
  for (const auto& [id, e] : objects_) {
    if (e.has_spill_file) RemoveSpillFile(SpillPath(id));
  }
  // region_'s destructor stops pre-faulting, unmaps and closes the memory file.
}

absl::StatusOr<ObjectLocation> ObjectStore::CreateObject(const ObjectId& id, uint64_t size,
                                                         ClientId client, CopyKind kind) {
  if (objects_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("object ", id.Hex(), " already exists"));
  }
  absl::StatusOr<uint64_t> offset = Allocate(id, size);
  if (!offset.ok()) return offset.status();
  Entry& e = objects_[id];
  e.size = size;
  e.offset = *offset;
  e.allocated = size > 0;
  e.creator = client;
  e.kind = kind;
  e.pins[client] = 1;
  e.num_pins = 1;
  return ObjectLocation{*offset, size};
}

absl::Status ObjectStore::Seal(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return absl::NotFoundError(absl::StrCat("no object ", id.Hex()));
  Entry& e = it->second;
  if (e.state != ObjectState::kUnsealed) {
    return absl::FailedPreconditionError(absl::StrCat("object ", id.Hex(), " is already sealed"));
  }
  e.state = ObjectState::kSealed;
  UpdateLru(id, e);
  return absl::OkStatus();
}

absl::StatusOr<ObjectLocation> ObjectStore::Pin(const ObjectId& id, ClientId client) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.delete_pending) {
    return absl::NotFoundError(absl::StrCat("no object ", id.Hex()));
  }
  Entry& e = it->second;  // stays valid: Allocate erases only evicted secondary copies
  if (e.state == ObjectState::kUnsealed) {
    return absl::FailedPreconditionError(absl::StrCat("object ", id.Hex(), " is not sealed"));
  }
  if (e.state == ObjectState::kSpilled) {
    absl::StatusOr<uint64_t> offset = Allocate(id, e.size);
    if (!offset.ok()) return offset.status();
    absl::Status read = ReadSpillFile(SpillPath(id), base() + *offset, e.size);
    if (!read.ok()) {
      allocator_.Free(*offset);
      return read;
    }
    e.offset = *offset;
    e.allocated = true;
    e.state = ObjectState::kSealed;
  }
  ++e.pins[client];
  ++e.num_pins;
  UpdateLru(id, e);
  return ObjectLocation{e.offset, e.size};
}

void ObjectStore::Unpin(const ObjectId& id, ClientId client) {
  auto it = objects_.find(id);
  if (it != objects_.end()) DropPins(it, client, 1);
}

void ObjectStore::Delete(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  if (it->second.num_pins == 0) {
    Remove(it);
  } else {
    it->second.delete_pending = true;
    UpdateLru(id, it->second);
  }
}

void ObjectStore::DisconnectClient(ClientId client) {
  for (auto it = objects_.begin(); it != objects_.end();) {
    auto next = std::next(it);
    if (it->second.creator == client && it->second.state == ObjectState::kUnsealed) {
      Remove(it);
    } else {
      DropPins(it, client, 0);
    }
    it = next;
  }
}

ObjectStoreStats ObjectStore::stats() const {
  ObjectStoreStats s;
  s.capacity_bytes = allocator_.capacity();
  s.used_bytes = allocator_.used_bytes();
  s.pinned_bytes = PinnedBytes();
  s.num_objects = objects_.size();
  for (const auto& [id, e] : objects_) {
    if (e.state == ObjectState::kSpilled) {
      ++s.num_spilled;
      s.spilled_bytes += e.size;
    } else if (e.in_lru && (e.has_spill_file || e.kind == CopyKind::kSecondary)) {
      ++s.num_evictable;
    }
  }
  return s;
}

std::optional<uint64_t> ObjectStore::SizeOf(const ObjectId& id) const {
  auto it = objects_.find(id);
  if (it == objects_.end()) return std::nullopt;
  return it->second.size;
}

std::optional<ObjectState> ObjectStore::StateOf(const ObjectId& id) const {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.delete_pending) return std::nullopt;
  return it->second.state;
}

std::vector<ObjectInfo> ObjectStore::List() const {
  std::vector<ObjectInfo> out;
  out.reserve(objects_.size());
  for (const auto& [id, e] : objects_) {
    out.push_back({id, e.size, e.state, e.num_pins, e.has_spill_file, e.delete_pending, e.kind});
  }
  std::sort(out.begin(), out.end(),
            [](const ObjectInfo& a, const ObjectInfo& b) { return a.id < b.id; });
  return out;
}

absl::StatusOr<uint64_t> ObjectStore::Allocate(const ObjectId& id, uint64_t size) {
  if (size == 0) return 0;
  if (std::optional<uint64_t> offset = allocator_.Allocate(size)) return *offset;
  if (FitsAfterReclaim(size)) {
    // 1. Restored copies whose spill file exists, and secondary copies (another node
    // has the primary): dropping them costs no I/O. A secondary copy is forgotten.
    for (auto lit = lru_.begin(); lit != lru_.end();) {
      auto victim = objects_.find(*lit);
      ++lit;  // FreeMemory and Remove unlink the victim from lru_
      if (victim->second.kind == CopyKind::kSecondary) {
        RAIO_LOG_DEBUG("object store: evicted secondary copy {} ({} bytes)", victim->first.Hex(),
                       victim->second.size);
        Remove(victim);
      } else if (victim->second.has_spill_file) {
        FreeMemory(victim->second);
        victim->second.state = ObjectState::kSpilled;
      } else {
        continue;
      }
      if (std::optional<uint64_t> offset = allocator_.Allocate(size)) return *offset;
    }
    // 2. Spill the rest, least recently used first. What is left in lru_ is primary
    // with no spill file, and FitsAfterReclaim counted it movable only if spilling is on.
    while (!options_.spill_dir.empty() && !lru_.empty()) {
      const ObjectId victim = lru_.front();
      absl::Status spilled = Spill(victim, objects_.at(victim));
      if (!spilled.ok()) return spilled;
      if (std::optional<uint64_t> offset = allocator_.Allocate(size)) return *offset;
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "object store is full: object ", id.Hex(), " needs ", size, " bytes; capacity ",
      allocator_.capacity(), " bytes, ", allocator_.used_bytes(), " bytes in use, ", PinnedBytes(),
      " bytes pinned, largest free block ", allocator_.largest_free_block(), " bytes",
      options_.spill_dir.empty() ? " (spilling is off)" : ""));
}

bool ObjectStore::Movable(const Entry& e) const {
  return e.in_lru &&
         (e.has_spill_file || e.kind == CopyKind::kSecondary || !options_.spill_dir.empty());
}

bool ObjectStore::FitsAfterReclaim(uint64_t size) const {
  if (size > allocator_.capacity()) return false;
  const uint64_t need = Allocator::AlignedSize(size);
  // The blocks that stay put split the region into gaps; one gap must hold `need`.
  std::vector<std::pair<uint64_t, uint64_t>> fixed;
  for (const auto& [id, e] : objects_) {
    if (e.allocated && !Movable(e)) {
      fixed.emplace_back(e.offset, allocator_.AllocatedSize(e.offset));
    }
  }
  std::sort(fixed.begin(), fixed.end());
  uint64_t gap_start = 0;
  for (const auto& [offset, block] : fixed) {
    if (offset - gap_start >= need) return true;
    gap_start = offset + block;
  }
  return allocator_.capacity() - gap_start >= need;
}

absl::Status ObjectStore::Spill(const ObjectId& id, Entry& e) {
  absl::Status written = WriteSpillFile(SpillPath(id), base() + e.offset, e.size);
  if (!written.ok()) return written;
  e.has_spill_file = true;
  FreeMemory(e);
  e.state = ObjectState::kSpilled;
  RAIO_LOG_DEBUG("object store: spilled {} ({} bytes)", id.Hex(), e.size);
  return absl::OkStatus();
}

void ObjectStore::FreeMemory(Entry& e) {
  if (e.allocated) allocator_.Free(e.offset);
  e.allocated = false;
  e.offset = 0;
  if (e.in_lru) {
    lru_.erase(e.lru_it);
    e.in_lru = false;
  }
}

void ObjectStore::UpdateLru(const ObjectId& id, Entry& e) {
  const bool want =
      e.state == ObjectState::kSealed && e.allocated && e.num_pins == 0 && !e.delete_pending;
  if (want && !e.in_lru) {
    e.lru_it = lru_.insert(lru_.end(), id);
    e.in_lru = true;
  } else if (!want && e.in_lru) {
    lru_.erase(e.lru_it);
    e.in_lru = false;
  }
}

bool ObjectStore::DropPins(EntryMap::iterator it, ClientId client, uint64_t count) {
  Entry& e = it->second;
  auto pin = e.pins.find(client);
  if (pin == e.pins.end()) return false;
  const uint64_t n = count == 0 ? pin->second : std::min(count, pin->second);
  pin->second -= n;
  if (pin->second == 0) e.pins.erase(pin);
  e.num_pins -= n;
  if (e.num_pins == 0 && e.delete_pending) {
    Remove(it);
    return true;
  }
  UpdateLru(it->first, e);
  return false;
}

void ObjectStore::Remove(EntryMap::iterator it) {
  FreeMemory(it->second);
  if (it->second.has_spill_file) RemoveSpillFile(SpillPath(it->first));
  objects_.erase(it);
}

std::string ObjectStore::SpillPath(const ObjectId& id) const {
  return absl::StrCat(options_.spill_dir, "/", id.Hex());
}

uint64_t ObjectStore::PinnedBytes() const {
  uint64_t pinned = 0;
  for (const auto& [id, e] : objects_) {
    if (e.allocated && e.num_pins > 0) pinned += allocator_.AllocatedSize(e.offset);
  }
  return pinned;
}

}  // namespace raio::node
