#include "raio/train/checkpoint_manager.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace raio::train::internal {
namespace {

namespace fs = std::filesystem;

// The index of a "checkpoint_<digits>" name, or -1.
int64_t IndexOfName(const std::string& name) {
  constexpr std::string_view kPrefix = "checkpoint_";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  int64_t index = 0;
  for (size_t i = kPrefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || index > (int64_t{1} << 50)) return -1;
    index = index * 10 + (name[i] - '0');
  }
  return index;
}

// Flushes a file or directory to disk; best effort (some shared filesystems refuse).
void SyncPath(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return absl::StrFormat("%d_%016x", ::getpid(), rng());
}

}  // namespace

std::string CheckpointDirName(int64_t index) { return absl::StrFormat("checkpoint_%06d", index); }

absl::Status PrepareRunDirectory(const std::string& run_path) {
  std::error_code ec;
  fs::create_directories(run_path, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("the run's storage directory ", run_path,
                                                      " cannot be created: ", ec.message()));
  }
  if (!fs::is_directory(run_path, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the run's storage path ", run_path, " is not a directory"));
  }
  const fs::path probe = fs::path(run_path) / (".write_probe_" + RandomSuffix());
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("the run's storage directory ", run_path,
                                                      " is not writable: ", std::strerror(errno)));
  }
  ::close(fd);
  fs::remove(probe, ec);
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> PersistCheckpoint(const std::string& run_path, int64_t index,
                                             const std::string& source_dir, const Metrics& metrics,
                                             int world_size) {
  std::error_code ec;
  if (!fs::is_directory(source_dir, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the reported checkpoint ", source_dir, " is not a directory"));
  }
  const fs::path final_path = fs::path(run_path) / CheckpointDirName(index);
  if (fs::exists(final_path, ec)) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint ", final_path.string(), " exists"));
  }
  const fs::path tmp = fs::path(run_path) / absl::StrCat(kTempPrefix, index, "_", RandomSuffix());
  auto fail = [&](const std::string& what) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return absl::InternalError(absl::StrCat("cannot persist checkpoint ", source_dir, " to ",
                                            final_path.string(), ": ", what));
  };
  // Copying a directory into itself would not end: the run's directory inside the source.
  const fs::path source_canon = fs::weakly_canonical(source_dir, ec);
  const fs::path run_canon = fs::weakly_canonical(run_path, ec);
  const std::string source_prefix = source_canon.string() + "/";
  if (run_canon == source_canon || run_canon.string().starts_with(source_prefix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the reported checkpoint ", source_dir, " contains the run's directory ", run_path,
        ": report a directory of its own (e.g. under a temporary directory)"));
  }
  // Symbolic links are followed (the checkpoint holds the files they name).
  fs::copy(source_dir, tmp, fs::copy_options::recursive, ec);
  if (ec) {
    std::string culprit;
    std::error_code walk_ec;
    for (fs::recursive_directory_iterator it(source_dir, walk_ec), end; !walk_ec && it != end;
         it.increment(walk_ec)) {
      std::error_code status_ec;
      if (it->is_symlink(status_ec) && !fs::exists(it->path(), status_ec)) {
        culprit = absl::StrCat(" (", it->path().string(), " is a symbolic link to nothing)");
        break;
      }
    }
    return fail(absl::StrCat("copy to ", tmp.string(), ": ", ec.message(), culprit));
  }

  nlohmann::json meta;
  meta["index"] = index;
  if (auto it = metrics.find("epoch"); it != metrics.end()) meta["epoch"] = it->second;
  if (auto it = metrics.find("step"); it != metrics.end()) meta["step"] = it->second;
  // JSON has no NaN or infinity: those go as Python's json writes them, "NaN",
  // "Infinity", "-Infinity", strings here, read back as numbers by ReadCheckpoint.
  nlohmann::json metrics_json = nlohmann::json::object();
  for (const auto& [name, value] : metrics) {
    if (std::isfinite(value)) {
      metrics_json[name] = value;
    } else {
      metrics_json[name] = std::isnan(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
    }
  }
  meta["metrics"] = metrics_json;
  meta["world_size"] = world_size;
  meta["time_unix_s"] =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  {
    std::ofstream out(tmp / kMetadataFileName, std::ios::trunc);
    out << meta.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    out.close();
    if (!out) return fail(absl::StrCat("write ", (tmp / kMetadataFileName).string()));
  }
  SyncPath(tmp / kMetadataFileName);
  SyncPath(tmp);
  // rename(2) of a directory onto a missing name is atomic; onto an existing one it fails
  // (ENOTEMPTY/EEXIST), so two writers of one index cannot both win.
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    return fail(absl::StrCat("rename from ", tmp.string(), ": ", std::strerror(errno)));
  }
  SyncPath(run_path);
  return Checkpoint{final_path.string(), index, metrics};
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& dir) {
  const fs::path meta_path = fs::path(dir) / kMetadataFileName;
  std::ifstream in(meta_path);
  if (!in) return absl::NotFoundError(absl::StrCat("no ", meta_path.string()));
  nlohmann::json meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("index") ||
      !meta["index"].is_number_integer()) {
    return absl::DataLossError(absl::StrCat("unreadable checkpoint metadata ", meta_path.string()));
  }
  Checkpoint checkpoint;
  checkpoint.path = dir;
  checkpoint.index = meta["index"].get<int64_t>();
  if (meta.contains("metrics") && meta["metrics"].is_object()) {
    for (const auto& [name, value] : meta["metrics"].items()) {
      if (value.is_number()) {
        checkpoint.metrics[name] = value.get<double>();
      } else if (value == "NaN") {
        checkpoint.metrics[name] = std::nan("");
      } else if (value == "Infinity" || value == "-Infinity") {
        checkpoint.metrics[name] = value == "Infinity" ? HUGE_VAL : -HUGE_VAL;
      }
    }
  }
  return checkpoint;
}

absl::Status ValidateCheckpointConfig(const CheckpointConfig& config) {
  if (config.num_to_keep && *config.num_to_keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CheckpointConfig.num_to_keep must be at least 1 (or unset to keep all), "
                     "got ",
                     *config.num_to_keep));
  }
  if (config.checkpoint_score_order != "max" && config.checkpoint_score_order != "min") {
    return absl::InvalidArgumentError(
        absl::StrCat("CheckpointConfig.checkpoint_score_order must be \"max\" or \"min\", got \"",
                     config.checkpoint_score_order, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManager> CheckpointManager::Create(std::string run_path,
                                                            CheckpointConfig config) {
  if (absl::Status s = ValidateCheckpointConfig(config); !s.ok()) return s;
  if (absl::Status s = PrepareRunDirectory(run_path); !s.ok()) return s;
  const fs::path lock_path = fs::path(run_path) / ".run.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot open the run's lock ", lock_path.string(), ": ", std::strerror(errno)));
  }
  auto lock_fd = std::shared_ptr<int>(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char holder[32] = {};
    (void)!::pread(fd, holder, sizeof(holder) - 1, 0);
    return absl::FailedPreconditionError(
        absl::StrCat("the run ", run_path, " is in use by another Trainer::Fit (pid ", holder,
                     "): one live run per name; give this one another RunConfig.name"));
  }
  const std::string pid = std::to_string(::getpid());
  // The pid is only for a later locker's message: best effort.
  (void)!::ftruncate(fd, 0);
  (void)!::pwrite(fd, pid.data(), pid.size(), 0);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_path, ec)) {
    if (entry.path().filename().string().starts_with(kTempPrefix)) {
      std::error_code ignored;
      fs::remove_all(entry.path(), ignored);
    }
  }
  CheckpointManager manager(std::move(run_path), std::move(config));
  manager.lock_fd_ = std::move(lock_fd);
  absl::StatusOr<std::vector<Checkpoint>> found = manager.Rescan();
  if (!found.ok()) return found.status();
  return manager;
}

bool CheckpointManager::Better(const Checkpoint& a, const Checkpoint& b) const {
  const std::string& attr = config_.checkpoint_score_attribute;
  if (!attr.empty()) {
    auto ia = a.metrics.find(attr);
    auto ib = b.metrics.find(attr);
    const bool has_a = ia != a.metrics.end(), has_b = ib != b.metrics.end();
    if (has_a != has_b) return has_a;
    if (has_a && ia->second != ib->second) {
      return config_.checkpoint_score_order == "max" ? ia->second > ib->second
                                                     : ia->second < ib->second;
    }
  }
  return a.index > b.index;  // newer first, also among equal scores
}

absl::StatusOr<std::vector<Checkpoint>> CheckpointManager::Rescan() {
  std::set<int64_t> seen;
  for (const Checkpoint& c : kept_) seen.insert(c.index);
  std::vector<Checkpoint> all;
  std::error_code ec;
  fs::directory_iterator it(run_path_, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot list the run's directory ", run_path_, ": ", ec.message()));
  }
  for (const auto& entry : it) {
    const int64_t index = IndexOfName(entry.path().filename().string());
    if (index < 0 || !entry.is_directory(ec)) continue;
    next_index_ = std::max(next_index_, index + 1);  // a persist there would fail: "exists"
    absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(entry.path().string());
    if (!checkpoint.ok()) continue;  // not ours, or written by hand: left alone
    checkpoint->index = index;       // the directory's name wins over a copied metadata file
    all.push_back(*std::move(checkpoint));
  }
  std::sort(all.begin(), all.end(),
            [](const Checkpoint& a, const Checkpoint& b) { return a.index < b.index; });
  std::vector<Checkpoint> fresh;
  for (const Checkpoint& c : all) {
    if (!seen.count(c.index)) fresh.push_back(c);
    next_index_ = std::max(next_index_, c.index + 1);
  }
  const int64_t latest_index = all.empty() ? -1 : all.back().index;
  std::sort(all.begin(), all.end(),
            [this](const Checkpoint& a, const Checkpoint& b) { return Better(a, b); });
  kept_.clear();
  for (size_t i = 0; i < all.size(); ++i) {
    const bool keep = !config_.num_to_keep || static_cast<int64_t>(i) < *config_.num_to_keep ||
                      all[i].index == latest_index;
    if (keep) {
      kept_.push_back(all[i]);
      continue;
    }
    std::error_code remove_ec;
    fs::remove_all(all[i].path, remove_ec);
    if (remove_ec) {
      std::cerr << "raio.train: cannot delete checkpoint " << all[i].path << ": "
                << remove_ec.message() << " (retried at the next checkpoint)\n";
      kept_.push_back(all[i]);  // still there: seen, and retried next time
    }
  }
  return fresh;
}

std::optional<Checkpoint> CheckpointManager::latest() const {
  std::optional<Checkpoint> out;
  for (const Checkpoint& c : kept_) {
    if (!out || c.index > out->index) out = c;
  }
  return out;
}

std::optional<Checkpoint> CheckpointManager::best() const {
  if (kept_.empty()) return std::nullopt;
  return kept_.front();
}

}  // namespace raio::train::internal
