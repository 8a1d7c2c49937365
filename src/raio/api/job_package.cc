#include "raio/api/job_package.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "raio/common/sha256.h"
#include "raio/rpc/service.h"

namespace raio::api {

namespace {

absl::StatusOr<proto::PackageFile> Describe(const std::string& path, const std::string& name) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job file '", name, "' is not a regular file",
                     ec ? absl::StrCat(" (", ec.message(), ")") : std::string()));
  }
  absl::StatusOr<std::string> sha = Sha256OfFile(path);
  if (!sha.ok()) return absl::InvalidArgumentError(sha.status().message());
  proto::PackageFile f;
  f.set_path(name);
  f.set_sha256(*sha);
  f.set_size_bytes(std::filesystem::file_size(path, ec));
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat("job file '", name, "': ", ec.message()));
  }
  return f;
}

}  // namespace

absl::StatusOr<std::vector<proto::PackageFile>> DescribeJobPackage(
    const std::string& executable, const std::vector<std::string>& files) {
  std::vector<proto::PackageFile> out;
  auto exe = Describe(executable, executable);
  if (!exe.ok()) return exe.status();
  out.push_back(std::move(*exe));
  for (const std::string& name : files) {
    std::filesystem::path p(name);
    bool climbs = false;
    for (const auto& part : p) climbs = climbs || part == "..";
    if (name.empty() || p.is_absolute() || climbs) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job file '", name, "' must be a path relative to the working directory, without '..'"));
    }
    auto f = Describe(name, name);
    if (!f.ok()) return f.status();
    out.push_back(std::move(*f));
  }
  return out;
}

absl::Status UploadJobPackage(rpc::Connection& head,
                              const std::vector<proto::PackageFile>& package) {
  for (std::size_t i = 0; i < package.size(); ++i) {
    const proto::PackageFile& f = package[i];
    proto::StatPackageRequest stat;
    stat.set_sha256(f.sha256());
    stat.set_size_bytes(f.size_bytes());
    auto have = rpc::CallSync<proto::STAT_PACKAGE>(head, stat);
    if (!have.ok()) return have.status();
    if (have->present()) continue;
    // The executable is read through /proc/self/exe's target (package[0].path), the
    // declared files relative to the working directory, as described.
    std::ifstream in(f.path(), std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot open job file '", f.path(), "': ", std::strerror(errno)));
    }
    proto::UploadPackageChunkRequest chunk;
    chunk.set_sha256(f.sha256());
    chunk.set_size_bytes(f.size_bytes());
    uint64_t offset = 0;
    do {
      std::string* data = chunk.mutable_data();
      data->resize(std::min<uint64_t>(kUploadChunkBytes, f.size_bytes() - offset));
      in.read(data->data(), static_cast<std::streamsize>(data->size()));
      if (static_cast<std::size_t>(in.gcount()) != data->size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("job file '", f.path(), "' changed while it was uploaded"));
      }
      chunk.set_offset(offset);
      auto sent = rpc::CallSync<proto::UPLOAD_PACKAGE_CHUNK>(head, chunk);
      if (!sent.ok()) return sent.status();
      offset += data->size();
    } while (offset < f.size_bytes());
  }
  return absl::OkStatus();
}

std::vector<std::string> JobFilesFromEnvironment() {
  const char* env = std::getenv("RAIO_JOB_FILES");
  if (env == nullptr) return {};
  return absl::StrSplit(env, ':', absl::SkipEmpty());
}

}  // namespace raio::api
