#include "raio/node/object_store/store_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"

namespace raio::node {

namespace {

constexpr std::size_t kRandomChars = 6;  // mkstemp's XXXXXX

template <typename T>
bool ParseDecimal(std::string_view s, T* out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

}  // namespace

std::string StoreFileStem(const StoreFileCreator& creator) {
  return absl::StrCat(kStoreFilePrefix, creator.process.pid, "-", creator.process.start_ticks, "-",
                      creator.pid_namespace, "-");
}

std::string SelfStoreFileStem() {
  std::optional<ProcessStamp> self = SelfProcessStamp();
  uint64_t ns = SelfPidNamespace();
  if (!self || ns == 0) return std::string(kStoreFilePrefix);
  return StoreFileStem({*self, ns});
}

std::optional<StoreFileCreator> ParseStoreFileName(std::string_view file_name) {
  const std::string_view prefix = kStoreFilePrefix;
  if (file_name.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::vector<std::string_view> parts;
  std::string_view rest = file_name.substr(prefix.size());
  for (std::size_t dash; (dash = rest.find('-')) != std::string_view::npos;) {
    parts.push_back(rest.substr(0, dash));
    rest.remove_prefix(dash + 1);
  }
  parts.push_back(rest);
  if (parts.size() != 4) return std::nullopt;
  StoreFileCreator c;
  if (!ParseDecimal(parts[0], &c.process.pid) || c.process.pid <= 0 ||
      !ParseDecimal(parts[1], &c.process.start_ticks) ||
      !ParseDecimal(parts[2], &c.pid_namespace) || c.pid_namespace == 0) {
    return std::nullopt;
  }
  if (parts[3].size() != kRandomChars) return std::nullopt;
  for (char ch : parts[3]) {
    if (!IsAlnum(ch)) return std::nullopt;
  }
  return c;
}

Reclaimed ReclaimStaleStoreFiles(const StoreSweepOptions& options) {
  const uid_t uid = options.uid.value_or(::geteuid());
  const uint64_t ns = options.pid_namespace.value_or(SelfPidNamespace());
  Reclaimed total;
  if (ns == 0) return total;  // cannot tell whose pids the names hold
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options.dir, ec)) {
    const std::string name = entry.path().filename().string();
    std::optional<StoreFileCreator> creator = ParseStoreFileName(name);
    if (!creator || creator->pid_namespace != ns) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid) {
      continue;
    }
    if (CheckProcess(creator->process.pid, creator->process.start_ticks) !=
        ProcessLiveness::kGone) {
      continue;
    }
    if (::unlink(entry.path().c_str()) != 0) continue;
    const uint64_t bytes = static_cast<uint64_t>(st.st_blocks) * 512;
    RAIO_LOG_INFO(
        "removed the object store file {} left by process {}, which is gone ({:.1f} MiB of "
        "shared memory)",
        entry.path().string(), creator->process.pid, static_cast<double>(bytes) / (1 << 20));
    ++total.files;
    total.bytes += bytes;
  }
  return total;
}

}  // namespace raio::node
