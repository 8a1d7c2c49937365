#include "raio/node/object_store/allocator.h"

#include <algorithm>
#include <iterator>

#include "raio/common/logging.h"

namespace raio::node {

Allocator::Allocator(uint64_t capacity) : capacity_(capacity / kAlignment * kAlignment) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

uint64_t Allocator::AlignedSize(uint64_t size) {
  return (size + kAlignment - 1) / kAlignment * kAlignment;
}

std::optional<uint64_t> Allocator::Allocate(uint64_t size) {
  RAIO_CHECK(size > 0);
  if (size > capacity_) return std::nullopt;  // also keeps AlignedSize from overflowing
  const uint64_t need = AlignedSize(size);
  // First fit, lowest offset first. Linear in the number of free blocks, which stays
  // small because neighbours coalesce; a size-indexed tree is the next step if
  // profiles ever show this.
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + need, rest);
    allocated_.emplace(offset, need);
    used_bytes_ += need;
    return offset;
  }
  return std::nullopt;
}

void Allocator::Free(uint64_t offset) {
  auto a = allocated_.find(offset);
  RAIO_CHECK(a != allocated_.end());
  uint64_t start = offset;
  uint64_t size = a->second;
  used_bytes_ -= size;
  allocated_.erase(a);

  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + size) {  // merge with the block after
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // merge with the block before
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
}

uint64_t Allocator::largest_free_block() const {
  uint64_t best = 0;
  for (const auto& [offset, size] : free_) best = std::max(best, size);
  return best;
}

uint64_t Allocator::AllocatedSize(uint64_t offset) const {
  auto it = allocated_.find(offset);
  return it == allocated_.end() ? 0 : it->second;
}

std::vector<std::pair<uint64_t, uint64_t>> Allocator::FreeBlocks() const {
  return {free_.begin(), free_.end()};
}

}  // namespace raio::node
