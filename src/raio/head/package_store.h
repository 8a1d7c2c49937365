// PackageStore: the head's content-addressed store of job packages (Ray's runtime_env
// packages in the GCS, kept as files here). A driver uploads its executable and the files
// it declares once per content (STAT_PACKAGE, then UPLOAD_PACKAGE_CHUNK in order); nodes
// other than the driver's fetch them by SHA-256 (FETCH_PACKAGE_CHUNK) before they start
// the job's workers (docs/design/cluster.md "Code on every node").
//
// Layout: `dir`/<sha256> for each complete file; an upload in progress writes
// `dir`/<sha256>.<uploader>.part and renames it once its digest matches. Files are kept until the
// head's session directory is removed.
// Errors: InvalidArgument for a malformed hash, a size over max_file_bytes or an offset
// out of order; DataLoss when the uploaded bytes do not hash to the name; NotFound for a
// fetch of a file the store does not hold; Internal for a failed write or read (with the
// path and errno's text).
// Thread-safety: not thread-safe; lives on the head's loop.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/common/sha256.h"

namespace raio::head {

class PackageStore {
 public:
  // The largest file accepted, in bytes (a protobuf-free stream would lift this).
  static constexpr uint64_t kMaxFileBytes = uint64_t{4} << 30;

  // `dir` is created when missing.
  explicit PackageStore(std::string dir);
  ~PackageStore();

  const std::string& dir() const { return dir_; }

  // Whether a complete file with this digest and size is held.
  bool Has(const std::string& sha256, uint64_t size_bytes) const;

  // Appends `data` at `offset` of `uploader`'s upload of (`sha256`, `size_bytes`) (an
  // uploader: one connection; several may upload the same file at once, each into a part
  // file of its own, and the first complete one is kept). Offset 0 starts (or restarts)
  // it; any other offset must equal the bytes this uploader sent so far. When the last
  // byte arrives the digest is checked and the file kept. Uploading a file already held
  // is a no-op (and ends that uploader's part).
  absl::Status Write(uint64_t uploader, const std::string& sha256, uint64_t size_bytes,
                     uint64_t offset, std::string_view data);
  // Drops what `uploader` had not finished (its connection closed).
  void AbortUploadsOf(uint64_t uploader);

  // Up to `max_bytes` of a held file from `offset` (empty at or past its end), and its
  // size.
  absl::StatusOr<std::string> Read(const std::string& sha256, uint64_t offset, uint32_t max_bytes,
                                   uint64_t* size_bytes) const;

 private:
  struct Upload {
    int fd = -1;
    uint64_t size_bytes = 0;
    uint64_t received = 0;
    std::unique_ptr<Sha256> digest;
  };
  using Key = std::pair<uint64_t, std::string>;  // uploader, sha256
  std::string PathOf(const std::string& sha256) const;
  std::string PartOf(const Key& key) const;
  void Abort(const Key& key);

  std::string dir_;
  std::map<Key, Upload> uploads_;
};

}  // namespace raio::head
