// PackageCache: a node's cache of job package files fetched from the head's package
// store (head/package_store.h) by SHA-256, so that the node can run the workers of a job
// whose driver is on another host without its executable being there beforehand, and
// fetches each content once (docs/design/cluster.md "Code on every node").
//
// Layout: `dir`/<sha256> for each complete file (mode 0755), `dir`/<sha256>.part while it
// is fetched. Chunks of kFetchChunkBytes are fetched one after another over the head
// connection (FETCH_PACKAGE_CHUNK) and hashed as they arrive; a file whose digest does not
// match its name is dropped with DataLoss.
// Thread-safety: not thread-safe; lives on the node's loop, like its head connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "raio/common/sha256.h"
#include "raio/head.pb.h"
#include "raio/rpc/connection.h"

namespace raio::node {

class PackageCache {
 public:
  static constexpr uint32_t kFetchChunkBytes = 8u << 20;
  // The path of the cached file, or why it could not be fetched.
  using Done = std::function<void(absl::StatusOr<std::string>)>;

  explicit PackageCache(std::string dir) : dir_(std::move(dir)) {}
  ~PackageCache();

  // Calls `done` (on this loop; at once when the file is cached) with the path of `file`
  // in the cache, fetching it over `head` first. Concurrent requests for one file share a
  // fetch. Errors: the head's (NotFound: it does not hold the file), Unavailable when the
  // head connection is gone, DataLoss for a digest or size mismatch, Internal for a
  // failed write (with the path and errno's text).
  void Get(const std::shared_ptr<rpc::Connection>& head, const proto::PackageFile& file, Done done);

  // How many files were fetched (not found in the cache) since the node started.
  uint64_t fetched() const { return fetched_; }

 private:
  struct Fetch {
    proto::PackageFile file;
    std::shared_ptr<rpc::Connection> head;
    int fd = -1;
    uint64_t received = 0;
    Sha256 digest;
    std::vector<Done> waiters;
  };
  std::string PathOf(const std::string& sha256) const { return dir_ + "/" + sha256; }
  void Next(const std::string& sha256);
  void Finish(const std::string& sha256, absl::StatusOr<std::string> result);

  std::string dir_;
  std::map<std::string, std::unique_ptr<Fetch>> fetches_;  // by sha256
  uint64_t fetched_ = 0;
};

}  // namespace raio::node
