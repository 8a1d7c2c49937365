// ShmRegion: the object store's shared memory. An anonymous memory file (memfd_create,
// close-on-exec), sized with ftruncate, sealed against resizing and mapped MAP_SHARED.
// It has no name in any file system: other processes on the node receive its descriptor
// over the node's Unix socket (rpc/fd_passing.h) and map it read/write to see the objects
// without copying. The memory goes back to the system when the last descriptor and
// mapping of it go, so a killed daemon leaves nothing behind. The seals (no shrinking,
// no growing) keep any holder of the descriptor from truncating the region under the
// others' mappings, which would SIGBUS them.
//
// Fresh tmpfs pages are allocated and zeroed on first touch, which runs at only
// 0.2-0.6 GB/s on our VMs against ~15 GB/s for warm memory. So a background thread
// pre-faults the region from the lowest offset up, in chunks, with
// madvise(MADV_POPULATE_WRITE) (Linux 5.14+); on older kernels it falls back to an
// atomic no-op write (fetch_or 0) on one byte per page, which faults the page in
// without disturbing bytes a client may already be writing there. Together with the
// allocator's lowest-offset-first policy this makes Puts land on warm memory.
//
// Threading: the accessors are safe from any thread. The prefault thread is the only
// thread the region starts; the destructor stops it (at most one chunk of work later)
// and joins it, then unmaps the region and closes its descriptor.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "raio/common/unique_fd.h"

namespace raio::node {

class ShmRegion {
 public:
  static constexpr uint64_t kDefaultPrefaultChunkBytes = 64ull << 20;

  // Creates the memory file, of `size_bytes` rounded up to the page size, maps it, and
  // starts pre-faulting unless `prefault` is false. Errors: InvalidArgument (size 0),
  // ResourceExhausted (more than the machine's physical memory), Internal
  // (memfd_create/ftruncate/fcntl/mmap failed; the message carries errno's text).
  // Does not block on the pre-faulting.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ShmRegion>> Create(
      uint64_t size_bytes, bool prefault = true,
      uint64_t prefault_chunk_bytes = kDefaultPrefaultChunkBytes,
      uint64_t prefault_limit_bytes = UINT64_MAX);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  // The region's descriptor, owned by the region: pass copies of it to clients
  // (SendFd), who map it read/write, MAP_SHARED, at offset 0 and size().
  int fd() const { return fd_.get(); }
  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  // Bytes from offset 0 up that the prefault thread has faulted in so far.
  uint64_t prefaulted_bytes() const { return prefaulted_bytes_.load(std::memory_order_acquire); }
  // True once the prefault thread has finished (the whole region, or stopped early
  // after an error, which it logs); also true when pre-faulting was off.
  bool prefault_done() const { return prefault_done_.load(std::memory_order_acquire); }

 private:
  ShmRegion(UniqueFd fd, uint8_t* base, uint64_t size);
  void PrefaultLoop(uint64_t chunk_bytes);

  const UniqueFd fd_;
  uint8_t* const base_;
  const uint64_t size_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> prefault_done_{false};
  std::atomic<uint64_t> prefaulted_bytes_{0};
  std::thread prefault_thread_;
  uint64_t prefault_limit_ = UINT64_MAX;  // pre-fault only offsets below this
};

}  // namespace raio::node
