#include "raio/node/object_store/spill_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"

namespace raio::node {

namespace {

absl::Status IoError(absl::string_view what, const std::string& path, int err) {
  return absl::InternalError(
      absl::StrCat("spill file ", what, " ", path, ": ", std::strerror(err)));
}

}  // namespace

absl::Status WriteSpillFile(const std::string& path, const uint8_t* data, uint64_t size) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("open", path, errno);
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      close(fd);
      unlink(path.c_str());
      return IoError("write", path, err);
    }
    done += static_cast<uint64_t>(n);
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(path.c_str());
    return IoError("close", path, err);
  }
  return absl::OkStatus();
}

absl::Status ReadSpillFile(const std::string& path, uint8_t* data, uint64_t size) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("spill file missing: ", path));
    return IoError("open", path, errno);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return IoError("stat", path, err);
  }
  if (static_cast<uint64_t>(st.st_size) != size) {
    close(fd);
    return absl::DataLossError(
        absl::StrCat("spill file ", path, " holds ", st.st_size, " bytes, expected ", size));
  }
  uint64_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, data + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      close(fd);
      return IoError("read", path, err);
    }
    done += static_cast<uint64_t>(n);
  }
  close(fd);
  return absl::OkStatus();
}

void RemoveSpillFile(const std::string& path) {
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    RAIO_LOG_WARN("could not remove spill file {}: {}", path, std::strerror(errno));
  }
}

}  // namespace raio::node
