// Working directories as zip archives (libarchive): the CLI packs a directory for
// upload (`raio job submit --working-dir`), the job's supervisor unpacks it on its node.
// Thread-safety: free functions on their arguments; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace raio::jobs {

// The regular files and directories under `dir` as zip bytes, paths relative to `dir`,
// modes kept. Symbolic links are followed, as Ray does: a link to a file is packed as the
// file's content under the link's name, a link to a directory as that directory's content
// under the link's name (wherever the target lies); a link back into a directory being
// walked (a loop) and a dangling link are left out. A path matching one of `excludes` (fnmatch
// globs, tried against the relative path and against each of its components, e.g. "build", "*.o",
// "data/*.bin") is left out, with what is under it. InvalidArgument when `dir` is not a
// directory; ResourceExhausted when the files add up to more than `max_bytes` (the message
// gives both sizes); Internal for a read error naming the file.
absl::StatusOr<std::string> PackDirectory(const std::string& dir,
                                          const std::vector<std::string>& excludes,
                                          uint64_t max_bytes);

// Unpacks zip (or tar) `bytes` into the existing directory `dest`. Entries that would land
// outside it (absolute paths, "..", through symbolic links) and symbolic links whose
// target lies outside it are refused: InvalidArgument naming the entry. Internal for a write error.
absl::Status UnpackArchive(std::string_view bytes, const std::string& dest);

// The SHA-256 of `bytes` as 64 lowercase hex digits (OpenSSL): content-addressed package
// names, _raio_pkg_<sha256>.zip.
std::string Sha256Hex(std::string_view bytes);

// The regular files under `dir`, as paths relative to it, sorted.
std::vector<std::string> ListRegularFiles(const std::string& dir);

}  // namespace raio::jobs
