#include "raio/node/object_store/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/node/object_store/store_files.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace raio::node {

namespace {

uint64_t PageSize() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

absl::Status ErrnoError(absl::string_view what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Create(const std::string& dir,
                                                             uint64_t size_bytes, bool prefault,
                                                             uint64_t prefault_chunk_bytes,
                                                             uint64_t prefault_limit_bytes) {
  if (size_bytes == 0) return absl::InvalidArgumentError("object store capacity must be > 0");
  const uint64_t page = PageSize();
  if (size_bytes > UINT64_MAX - page) {
    return absl::InvalidArgumentError(absl::StrCat("capacity too large: ", size_bytes));
  }
  const uint64_t size = (size_bytes + page - 1) / page * page;

  struct statvfs fs {};
  if (statvfs(dir.c_str(), &fs) != 0) return ErrnoError("statvfs", dir, errno);
  const uint64_t avail = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (avail < size) {
    return absl::ResourceExhaustedError(
        absl::StrCat("object store needs ", size, " bytes in ", dir, " but only ", avail,
                     " are free (enlarge the tmpfs or lower the store's capacity)"));
  }

  // The name records this process, so that a later sweep can tell when it is gone.
  std::string path_template = absl::StrCat(dir, "/", SelfStoreFileStem(), "XXXXXX");
  std::vector<char> buf(path_template.begin(), path_template.end());
  buf.push_back('\0');
  int fd = mkstemp(buf.data());
  if (fd < 0) return ErrnoError("mkstemp", path_template, errno);
  std::string path(buf.data());
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int err = errno;
    close(fd);
    unlink(path.c_str());
    return ErrnoError("ftruncate", path, err);
  }
  void* addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int mmap_errno = errno;
  close(fd);  // the mapping keeps the file's pages; clients open the path
  if (addr == MAP_FAILED) {
    unlink(path.c_str());
    return ErrnoError("mmap", path, mmap_errno);
  }
  std::unique_ptr<ShmRegion> region(
      new ShmRegion(std::move(path), static_cast<uint8_t*>(addr), size));
  region->prefault_limit_ = prefault_limit_bytes;
  if (prefault) {
    const uint64_t chunk = std::max(page, prefault_chunk_bytes / page * page);
    region->prefault_thread_ = std::thread([r = region.get(), chunk] { r->PrefaultLoop(chunk); });
  } else {
    region->prefault_done_.store(true, std::memory_order_release);
  }
  return region;
}

ShmRegion::ShmRegion(std::string path, uint8_t* base, uint64_t size)
    : path_(std::move(path)), base_(base), size_(size) {}

ShmRegion::~ShmRegion() {
  stop_.store(true, std::memory_order_release);
  if (prefault_thread_.joinable()) prefault_thread_.join();
  munmap(base_, size_);
  unlink(path_.c_str());
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
          RAIO_LOG_WARN("object store: pre-faulting {} stopped at offset {}: {}", path_, offset,
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
