// SHA-256 (FIPS 180-4) through OpenSSL's EVP interface, for content-addressed files
// (job packages, docs/design/cluster.md "Code on every node").
// Thread-safety: a Sha256 object is not thread-safe; the functions are.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace raio {

// An incremental digest: Update with the bytes in order, then HexDigest once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::string_view bytes);
  // The digest of everything updated so far as 64 lowercase hex digits. Ends the digest:
  // call Reset before updating again.
  std::string HexDigest();
  void Reset();

 private:
  struct Context;
  std::unique_ptr<Context> ctx_;
};

// The hex SHA-256 of the file at `path`, read in 1 MiB pieces. NotFound / Internal with
// the path and errno's text when it cannot be opened or read.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

// Whether `text` looks like a hex SHA-256 (64 lowercase hex digits), so that it can name
// a file safely.
bool IsSha256Hex(std::string_view text);

}  // namespace raio
