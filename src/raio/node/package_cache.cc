#include "raio/node/package_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/rpc/service.h"

namespace raio::node {

PackageCache::~PackageCache() {
  for (auto& [sha, f] : fetches_) {
    if (f->fd >= 0) ::close(f->fd);
    ::unlink((PathOf(sha) + ".part").c_str());
  }
}

void PackageCache::Get(const std::shared_ptr<rpc::Connection>& head, const proto::PackageFile& file,
                       Done done) {
  const std::string& sha = file.sha256();
  if (!IsSha256Hex(sha)) {
    done(absl::InvalidArgumentError(absl::StrCat("'", sha.substr(0, 80), "' is not a SHA-256")));
    return;
  }
  struct stat st;
  if (::stat(PathOf(sha).c_str(), &st) == 0 &&
      static_cast<uint64_t>(st.st_size) == file.size_bytes()) {
    done(PathOf(sha));
    return;
  }
  if (auto it = fetches_.find(sha); it != fetches_.end()) {
    it->second->waiters.push_back(std::move(done));
    return;
  }
  if (head == nullptr || head->closed()) {
    done(absl::UnavailableError("the node has no connection to the head"));
    return;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const std::string part = PathOf(sha) + ".part";
  int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0700);
  if (fd < 0) {
    done(absl::InternalError(absl::StrCat("cannot create ", part, ": ", std::strerror(errno))));
    return;
  }
  auto f = std::make_unique<Fetch>();
  f->file = file;
  f->head = head;
  f->fd = fd;
  f->waiters.push_back(std::move(done));
  fetches_[sha] = std::move(f);
  RAIO_LOG_INFO("fetching package file {} ({}, {} bytes) from the head", sha, file.path(),
                file.size_bytes());
  Next(sha);
}

void PackageCache::Next(const std::string& sha) {
  Fetch& f = *fetches_.at(sha);
  proto::FetchPackageChunkRequest req;
  req.set_sha256(sha);
  req.set_offset(f.received);
  req.set_max_bytes(kFetchChunkBytes);
  rpc::Call<proto::FETCH_PACKAGE_CHUNK>(
      *f.head, req, [this, sha](absl::StatusOr<proto::FetchPackageChunkReply> reply) {
        auto it = fetches_.find(sha);
        if (it == fetches_.end()) return;
        Fetch& f = *it->second;
        if (!reply.ok()) return Finish(sha, reply.status());
        if (reply->size_bytes() != f.file.size_bytes() ||
            (reply->data().empty() && f.file.size_bytes() > 0)) {
          return Finish(sha, absl::DataLossError(absl::StrCat(
                                 "the head holds ", reply->size_bytes(), " bytes as package file ",
                                 sha, ", not ", f.file.size_bytes())));
        }
        const std::string& data = reply->data();
        for (std::size_t done = 0; done < data.size();) {
          ssize_t n = ::write(f.fd, data.data() + done, data.size() - done);
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            return Finish(sha, absl::InternalError(absl::StrCat("cannot write ", PathOf(sha),
                                                                ".part: ", std::strerror(errno))));
          }
          done += static_cast<std::size_t>(n);
        }
        f.digest.Update(data);
        f.received += data.size();
        if (f.received < f.file.size_bytes()) return Next(sha);
        const std::string got = f.digest.HexDigest();
        if (got != sha) {
          return Finish(sha, absl::DataLossError(absl::StrCat(
                                 "package file ", sha, " fetched from the head hashes to ", got)));
        }
        ::close(f.fd);
        f.fd = -1;
        const std::string part = PathOf(sha) + ".part";
        if (::chmod(part.c_str(), 0755) != 0 || ::rename(part.c_str(), PathOf(sha).c_str()) != 0) {
          return Finish(sha, absl::InternalError(absl::StrCat("cannot keep ", PathOf(sha), ": ",
                                                              std::strerror(errno))));
        }
        ++fetched_;
        Finish(sha, PathOf(sha));
      });
}

void PackageCache::Finish(const std::string& sha, absl::StatusOr<std::string> result) {
  auto it = fetches_.find(sha);
  if (it == fetches_.end()) return;
  std::unique_ptr<Fetch> f = std::move(it->second);
  fetches_.erase(it);
  if (f->fd >= 0) {
    ::close(f->fd);
    ::unlink((PathOf(sha) + ".part").c_str());
  }
  if (!result.ok()) {
    RAIO_LOG_WARN("cannot fetch package file {} ({}): {}", sha, f->file.path(),
                  result.status().message());
  }
  for (Done& done : f->waiters) done(result);
}

}  // namespace raio::node
