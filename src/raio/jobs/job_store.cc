#include "raio/jobs/job_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace raio::jobs {

namespace fs = std::filesystem;

absl::Status WriteFileAtomically(const std::string& path, std::string_view data) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": disk full?"));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<FileJobStore>> FileJobStore::Create(std::string dir) {
  std::error_code ec;
  fs::create_directories(dir + "/logs", ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, "/logs: ", ec.message()));
  }
  return std::unique_ptr<FileJobStore>(new FileJobStore(std::move(dir)));
}

std::string FileJobStore::LogPath(const std::string& id) const {
  return absl::StrCat(dir_, "/logs/", id, ".log");
}

absl::StatusOr<std::vector<JobRecord>> FileJobStore::LoadRecords() {
  const std::string path = dir_ + "/jobs.json";
  std::vector<JobRecord> out;
  std::ifstream in(path);
  if (!in) return out;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON array of jobs"));
  }
  std::lock_guard<std::mutex> l(mu_);
  order_.clear();
  records_.clear();
  for (const auto& item : j) {
    auto r = JobRecord::FromJson(item);
    if (!r.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", r.status().message()));
    }
    if (!records_.contains(r->submission_id)) order_.push_back(r->submission_id);
    records_[r->submission_id] = *r;
    out.push_back(std::move(*r));
  }
  return out;
}

absl::Status FileJobStore::WriteTable() {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& id : order_) all.push_back(records_.at(id).ToJson());
  return WriteFileAtomically(dir_ + "/jobs.json",
                             all.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

absl::Status FileJobStore::PutRecord(const JobRecord& record) {
  std::lock_guard<std::mutex> l(mu_);
  if (!records_.contains(record.submission_id)) order_.push_back(record.submission_id);
  records_[record.submission_id] = record;
  return WriteTable();
}

absl::Status FileJobStore::DeleteJob(const std::string& id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (records_.erase(id) > 0) {
      order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
      if (absl::Status s = WriteTable(); !s.ok()) return s;
    }
  }
  ::unlink(LogPath(id).c_str());
  return absl::OkStatus();
}

absl::Status FileJobStore::ResetLog(const std::string& id) {
  int fd = ::open(LogPath(id).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", LogPath(id), ": ", std::strerror(errno)));
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::Status FileJobStore::AppendLog(const std::string& id, uint64_t offset,
                                     std::string_view bytes) {
  const std::string path = LogPath(id);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  uint64_t size = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  // Skip what a retried append already wrote.
  size_t done =
      size > offset ? static_cast<size_t>(std::min<uint64_t>(size - offset, bytes.size())) : 0;
  while (done < bytes.size()) {
    ssize_t n =
        ::pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return absl::OkStatus();
}

absl::StatusOr<StoredLog> FileJobStore::ReadLog(const std::string& id, uint64_t offset,
                                                uint64_t max_bytes) {
  StoredLog log;
  log.offset = offset;
  std::ifstream in(LogPath(id), std::ios::binary | std::ios::ate);
  if (!in) return log;
  log.size = static_cast<uint64_t>(in.tellg());
  if (log.size > offset && max_bytes > 0) {
    in.seekg(static_cast<std::streamoff>(offset));
    log.data.resize(static_cast<size_t>(std::min(log.size - offset, max_bytes)));
    in.read(log.data.data(), static_cast<std::streamsize>(log.data.size()));
    log.data.resize(static_cast<size_t>(in.gcount()));
  }
  return log;
}

}  // namespace raio::jobs
