#include "raio/head/package_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"

namespace raio::head {

namespace {

absl::Status CheckName(const std::string& sha256, uint64_t size_bytes) {
  if (!IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", sha256.substr(0, 80), "' is not a SHA-256 (64 lowercase hex digits)"));
  }
  if (size_bytes > PackageStore::kMaxFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a package file of ", size_bytes,
                                                   " bytes is over the limit of ",
                                                   PackageStore::kMaxFileBytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

PackageStore::PackageStore(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) RAIO_LOG_WARN("cannot create the package store {}: {}", dir_, ec.message());
}

PackageStore::~PackageStore() {
  for (auto& [key, upload] : uploads_) {
    if (upload.fd >= 0) ::close(upload.fd);
    ::unlink(PartOf(key).c_str());
  }
}

std::string PackageStore::PartOf(const Key& key) const {
  return absl::StrCat(PathOf(key.second), ".", key.first, ".part");
}

void PackageStore::AbortUploadsOf(uint64_t uploader) {
  for (auto it = uploads_.lower_bound(Key{uploader, ""});
       it != uploads_.end() && it->first.first == uploader;) {
    const Key key = (it++)->first;
    Abort(key);
  }
}

std::string PackageStore::PathOf(const std::string& sha256) const {
  return absl::StrCat(dir_, "/", sha256);
}

bool PackageStore::Has(const std::string& sha256, uint64_t size_bytes) const {
  if (!CheckName(sha256, size_bytes).ok()) return false;
  struct stat st;
  return ::stat(PathOf(sha256).c_str(), &st) == 0 &&
         static_cast<uint64_t>(st.st_size) == size_bytes;
}

void PackageStore::Abort(const Key& key) {
  auto it = uploads_.find(key);
  if (it == uploads_.end()) return;
  if (it->second.fd >= 0) ::close(it->second.fd);
  ::unlink(PartOf(key).c_str());
  uploads_.erase(it);
}

absl::Status PackageStore::Write(uint64_t uploader, const std::string& sha256, uint64_t size_bytes,
                                 uint64_t offset, std::string_view data) {
  if (absl::Status s = CheckName(sha256, size_bytes); !s.ok()) return s;
  const Key key{uploader, sha256};
  if (Has(sha256, size_bytes)) {
    Abort(key);  // another uploader finished it first
    return absl::OkStatus();
  }
  if (offset == 0) Abort(key);
  auto it = uploads_.find(key);
  if (it == uploads_.end()) {
    if (offset != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "package file ", sha256, ": a chunk at offset ", offset, " of an upload never started"));
    }
    const std::string part = PartOf(key);
    int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("cannot create ", part, ": ", std::strerror(errno)));
    }
    Upload& u = uploads_[key];
    u.fd = fd;
    u.size_bytes = size_bytes;
    u.digest = std::make_unique<Sha256>();
    it = uploads_.find(key);
  }
  Upload& u = it->second;
  if (u.size_bytes != size_bytes || offset != u.received || data.size() > size_bytes - u.received) {
    const std::string why = absl::StrCat("package file ", sha256, ": a chunk of ", data.size(),
                                         " bytes at offset ", offset, " does not follow the ",
                                         u.received, " of ", u.size_bytes, " bytes received");
    Abort(key);
    return absl::InvalidArgumentError(why);
  }
  for (std::size_t done = 0; done < data.size();) {
    ssize_t n = ::write(u.fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = absl::StrCat("cannot write package file ", sha256, " in ", dir_, ": ",
                                           std::strerror(errno));
      Abort(key);
      return absl::InternalError(why);
    }
    done += static_cast<std::size_t>(n);
  }
  u.digest->Update(data);
  u.received += data.size();
  if (u.received < u.size_bytes) return absl::OkStatus();
  const std::string got = u.digest->HexDigest();
  if (got != sha256) {
    Abort(key);
    return absl::DataLossError(absl::StrCat("the ", size_bytes, " bytes uploaded as package file ",
                                            sha256, " hash to ", got));
  }
  ::close(u.fd);
  u.fd = -1;
  const std::string part = PartOf(key);
  if (::rename(part.c_str(), PathOf(sha256).c_str()) != 0) {
    const std::string why =
        absl::StrCat("cannot keep package file ", PathOf(sha256), ": ", std::strerror(errno));
    Abort(key);
    return absl::InternalError(why);
  }
  uploads_.erase(key);
  RAIO_LOG_INFO("package store: kept {} ({} bytes)", sha256, size_bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::string> PackageStore::Read(const std::string& sha256, uint64_t offset,
                                               uint32_t max_bytes, uint64_t* size_bytes) const {
  if (!IsSha256Hex(sha256)) return CheckName(sha256, 0);
  const std::string path = PathOf(sha256);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("the head's package store holds no file ", sha256, " (",
                                            std::strerror(errno), ")"));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  }
  *size_bytes = static_cast<uint64_t>(st.st_size);
  std::string out;
  if (offset < *size_bytes) {
    out.resize(std::min<uint64_t>(max_bytes, *size_bytes - offset));
    std::size_t done = 0;
    while (done < out.size()) {
      ssize_t n =
          ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        return absl::InternalError(
            absl::StrCat("cannot read ", path, ": ", n == 0 ? "it shrank" : std::strerror(errno)));
      }
      done += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
  return out;
}

}  // namespace raio::head
