// A driver's job package: its executable and the files it declares
// (InitOptions::job_files), uploaded to the head's package store once per content before
// the job registers, so that nodes on other hosts can run the job's workers without the
// files being there beforehand (docs/design/cluster.md "Code on every node").
// Thread-safety: call from the driver's Init thread (it blocks on the head connection).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "raio/head.pb.h"
#include "raio/rpc/connection.h"

namespace raio::api {

// Checks `files` (paths relative to the working directory, no "..", regular files) and
// returns them as package entries with their SHA-256 and size, after the executable at
// `executable`. InvalidArgument naming the path for a bad or missing file.
absl::StatusOr<std::vector<proto::PackageFile>> DescribeJobPackage(
    const std::string& executable, const std::vector<std::string>& files);

// Uploads each of `package` that the head does not hold yet (STAT_PACKAGE, then
// UPLOAD_PACKAGE_CHUNK in chunks of kUploadChunkBytes). Blocks; the head's error as is.
inline constexpr std::size_t kUploadChunkBytes = 8u << 20;
absl::Status UploadJobPackage(rpc::Connection& head,
                              const std::vector<proto::PackageFile>& package);

// The job files an Init without InitOptions::job_files declares: RAIO_JOB_FILES split at
// ':' (empty entries dropped).
std::vector<std::string> JobFilesFromEnvironment();

}  // namespace raio::api
