#include "raio/node/object_store/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/common/process.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace raio::node {

namespace {

uint64_t PageSize() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

absl::Status ErrnoError(absl::string_view what, int err) {
  return absl::InternalError(
      absl::StrCat(what, " (the object store's memory): ", std::strerror(err)));
}

// The name shown in /proc/<pid>/fd and /proc/<pid>/maps ("/memfd:raio-object-store").
constexpr char kMemfdName[] = "raio-object-store";

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(uint64_t size_bytes, bool prefault,
                                                             uint64_t prefault_chunk_bytes,
                                                             uint64_t prefault_limit_bytes) {
  if (size_bytes == 0) return absl::InvalidArgumentError("object store capacity must be > 0");
  const uint64_t page = PageSize();
  if (size_bytes > UINT64_MAX - page) {
    return absl::InvalidArgumentError(absl::StrCat("capacity too large: ", size_bytes));
  }
  const uint64_t size = (size_bytes + page - 1) / page * page;
  // A memory file has no file-system limit to check; the machine's memory is the bound
  // (beyond it, touching the pages would end in the OOM killer).
  const int64_t memory = DetectMemoryBytes();
  if (memory > 0 && size > static_cast<uint64_t>(memory)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("object store of ", size, " bytes is larger than this machine's memory (",
                     memory, " bytes); lower the store's capacity"));
  }

  UniqueFd fd(::memfd_create(kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return ErrnoError("memfd_create", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) return ErrnoError("ftruncate", errno);
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return ErrnoError("sealing", errno);
  }
  void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (addr == MAP_FAILED) return ErrnoError("mmap", errno);
  std::unique_ptr<ShmRegion> region(
      new ShmRegion(std::move(fd), static_cast<uint8_t*>(addr), size));
  region->prefault_limit_ = prefault_limit_bytes;
  if (prefault) {
    const uint64_t chunk = std::max(page, prefault_chunk_bytes / page * page);
    region->prefault_thread_ = std::thread([r = region.get(), chunk] { r->PrefaultLoop(chunk); });
  } else {
    region->prefault_done_.store(true, std::memory_order_release);
  }
  return region;
}

ShmRegion::ShmRegion(UniqueFd fd, uint8_t* base, uint64_t size)
    : fd_(std::move(fd)), base_(base), size_(size) {}

ShmRegion::~ShmRegion() {
  stop_.store(true, std::memory_order_release);
  if (prefault_thread_.joinable()) prefault_thread_.join();
  ::munmap(base_, size_);
  // fd_ closes; the memory goes once the clients' descriptors and mappings go too.
}

void ShmRegion::PrefaultLoop(uint64_t chunk_bytes) {
  const uint64_t page = PageSize();
  bool use_madvise = true;
  uint64_t offset = 0;
  const uint64_t end = std::min(size_, prefault_limit_);
  while (offset < end && !stop_.load(std::memory_order_acquire)) {
    const uint64_t len = std::min(chunk_bytes, end - offset);
    if (use_madvise) {
      if (madvise(base_ + offset, len, MADV_POPULATE_WRITE) != 0) {
        if (errno == EINTR || errno == EAGAIN) continue;  // retry the same chunk
        if (errno != EINVAL) {  // EINVAL: kernel too old; anything else is real
          RAIO_LOG_WARN("object store: pre-faulting stopped at offset {}: {}", offset,
                        std::strerror(errno));
          break;
        }
        use_madvise = false;
        continue;
      }
    } else {
      // A locked read-modify-write of 0 faults the page in writable and leaves any
      // byte a client wrote there meanwhile unchanged.
      for (uint64_t p = 0; p < len; p += page) {
        __atomic_fetch_or(base_ + offset + p, static_cast<uint8_t>(0), __ATOMIC_RELAXED);
      }
    }
    offset += len;
    prefaulted_bytes_.store(offset, std::memory_order_release);
  }
  prefault_done_.store(true, std::memory_order_release);
}

}  // namespace raio::node
