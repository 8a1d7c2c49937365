// Allocator: first-fit placement of variable-size blocks in a fixed range of offsets
// [0, capacity), as used by the object store over its shared-memory region. Offsets
// and block sizes are multiples of kAlignment (64 bytes: a cache line, enough for any
// scalar or SIMD load a reader may do in place). The search starts at the lowest
// offset so that memory that was used (and so is already faulted in) is reused first;
// freed blocks coalesce with free neighbours, so the free list never holds two
// adjacent blocks.
// Threading: not thread-safe; owned by the ObjectStore on the node's event loop.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace raio::node {

class Allocator {
 public:
  static constexpr uint64_t kAlignment = 64;

  // Manages [0, capacity rounded down to kAlignment).
  explicit Allocator(uint64_t capacity);

  // `size` rounded up to kAlignment (0 stays 0).
  static uint64_t AlignedSize(uint64_t size);

  // Reserves AlignedSize(size) bytes at the lowest offset where they fit and returns
  // that offset; nullopt when no free block is large enough (even if the free bytes
  // in total are). `size` must be > 0.
  std::optional<uint64_t> Allocate(uint64_t size);
  // Returns the block at `offset` (from Allocate) to the free list. The offset must
  // be allocated: freeing anything else is a bug in the caller (checked).
  void Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used_bytes() const { return used_bytes_; }
  uint64_t free_bytes() const { return capacity_ - used_bytes_; }
  uint64_t largest_free_block() const;
  std::size_t num_free_blocks() const { return free_.size(); }
  std::size_t num_allocated_blocks() const { return allocated_.size(); }
  // Size (aligned) of the block allocated at `offset`; 0 if none is.
  uint64_t AllocatedSize(uint64_t offset) const;
  // The free blocks as (offset, size), lowest offset first.
  std::vector<std::pair<uint64_t, uint64_t>> FreeBlocks() const;

 private:
  uint64_t capacity_;
  uint64_t used_bytes_ = 0;
  std::map<uint64_t, uint64_t> free_;       // offset -> size; never two adjacent
  std::map<uint64_t, uint64_t> allocated_;  // offset -> aligned size
};

}  // namespace raio::node
