#include "raio/common/running_task.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace raio {
namespace {
// Layout: byte 0 is 1 while a task runs; bytes 1..16 its id.
constexpr std::size_t kIdBytes = 16;
constexpr std::size_t kFileBytes = 1 + kIdBytes;
}  // namespace

std::string RunningTaskPath(const std::string& session_dir, const std::string& worker_hex) {
  return absl::StrCat(session_dir, "/w-", worker_hex, ".task");
}

absl::StatusOr<std::unique_ptr<RunningTaskMarker>> RunningTaskMarker::Create(
    const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  if (::ftruncate(fd, kFileBytes) != 0) {
    int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot size ", path, ": ", std::strerror(err)));
  }
  void* p = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("cannot map ", path, ": ", std::strerror(err)));
  }
  return std::unique_ptr<RunningTaskMarker>(new RunningTaskMarker(static_cast<char*>(p)));
}

RunningTaskMarker::~RunningTaskMarker() { ::munmap(page_, kFileBytes); }

void RunningTaskMarker::Set(std::string_view task_id) {
  std::size_t n = std::min(task_id.size(), kIdBytes);
  std::memcpy(page_ + 1, task_id.data(), n);
  std::memset(page_ + 1 + n, 0, kIdBytes - n);
  __atomic_store_n(page_, 1, __ATOMIC_RELEASE);
}

void RunningTaskMarker::Clear() { __atomic_store_n(page_, 0, __ATOMIC_RELEASE); }

std::optional<std::string> ReadRunningTask(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes(kFileBytes, '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(kFileBytes))) return std::nullopt;
  if (bytes[0] != 1) return std::string();
  return bytes.substr(1);
}

}  // namespace raio
