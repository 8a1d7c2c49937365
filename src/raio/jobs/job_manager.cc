#include "raio/jobs/job_manager.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "raio/jobs/archive.h"
#include "spdlog/spdlog.h"

namespace raio::jobs {

namespace {

namespace fs = std::filesystem;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Ray's generated ids look like raysubmit_<16 alphanumerics>.
std::string NewSubmissionId() {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "raiosubmit_";
  for (int i = 0; i < 16; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

// Writes `data` to `path` through a temporary file renamed into place.
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

// Packages named as the CLI names them carry their content's SHA-256.
std::optional<std::string> DigestInName(const std::string& name) {
  constexpr std::string_view kPrefix = "_raio_pkg_";
  if (!name.starts_with(kPrefix) || !name.ends_with(".zip")) return std::nullopt;
  std::string hex = name.substr(kPrefix.size(), name.size() - kPrefix.size() - 4);
  return hex.size() == 64 && hex.find_first_not_of("0123456789abcdef") == std::string::npos
             ? std::optional(hex)
             : std::nullopt;
}

}  // namespace

JobManager::JobManager(JobManagerOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(JobManagerOptions options) {
  std::error_code ec;
  for (const char* sub : {"", "/logs", "/packages"}) {
    fs::create_directories(options.state_dir + sub, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create ", options.state_dir, sub, ": ", ec.message()));
    }
  }
  std::unique_ptr<JobManager> m(new JobManager(std::move(options)));
  if (absl::Status s = m->Load(); !s.ok()) return s;
  return m;
}

JobManager::~JobManager() { Stop(); }

absl::Status JobManager::Load() {
  const std::string path = options_.state_dir + "/jobs.json";
  std::ifstream in(path);
  if (!in) return absl::OkStatus();
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON array of jobs"));
  }
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& item : j) {
      auto r = JobRecord::FromJson(item);
      if (!r.ok()) return r.status();
      if (!IsTerminal(r->status)) {
        r->message = absl::StrCat("the jobs server restarted while the job was ",
                                  JobStatusName(r->status), "; the job ended with it");
        r->status = JobStatus::kFailed;
        r->error_type = "JOB_SUPERVISOR_ACTOR_DIED";
        r->end_time_ms = NowMs();
        changed = true;
      }
      order_.push_back(r->submission_id);
      records_[r->submission_id] = std::move(*r);
    }
    ++version_;
  }
  if (changed) Persist();
  return absl::OkStatus();
}

void JobManager::Start() {
  monitor_ = std::thread([this] { MonitorLoop(); });
}

void JobManager::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (monitor_.joinable()) monitor_.join();
  std::map<std::string, Active> active;
  {
    std::lock_guard<std::mutex> l(mu_);
    active.swap(active_);
  }
  active.clear();  // their refs and handles go before raio does
  std::lock_guard<std::mutex> l(init_mu_);
  package_objects_.clear();
  if (initialized_) raio::Shutdown();
}

absl::Status JobManager::EnsureInit() {
  std::lock_guard<std::mutex> l(init_mu_);
  if (initialized_) return absl::OkStatus();
  try {
    InitOptions o;
    o.address = options_.head_address;
    o.ns = "_raio_jobs";
    raio::Init(o);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("the jobs server cannot join the cluster at ",
                                               options_.head_address, ": ", e.what()));
  }
  initialized_ = true;
  return absl::OkStatus();
}

std::string JobManager::LogPath(const std::string& id) const {
  return absl::StrCat(options_.state_dir, "/logs/", id, ".log");
}
std::string JobManager::PackagePath(const std::string& name) const {
  return absl::StrCat(options_.state_dir, "/packages/", name);
}

absl::StatusOr<std::string> JobManager::Submit(SubmitRequest request) {
  std::string package;
  if (!request.runtime_env.working_dir.empty()) {
    package = request.runtime_env.working_dir.substr(std::string_view("gcs://").size());
    if (!HasPackage(package)) {
      return absl::InvalidArgumentError(
          absl::StrCat("runtime_env.working_dir ", request.runtime_env.working_dir,
                       " was not uploaded: PUT /api/packages/gcs/", package, " first"));
    }
  }
  if (absl::Status s = EnsureInit(); !s.ok()) return s;
  // The archive goes into the object store once per package; supervisors on any node
  // read it from there.
  std::vector<uint8_t> no_archive;
  std::optional<ObjectRef<std::vector<uint8_t>>> archive;
  if (!package.empty()) {
    std::lock_guard<std::mutex> l(init_mu_);
    auto it = package_objects_.find(package);
    if (it == package_objects_.end()) {
      std::ifstream in(PackagePath(package), std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
      try {
        it = package_objects_.emplace(package, raio::Put(bytes)).first;
      } catch (const std::exception& e) {
        return absl::ResourceExhaustedError(
            absl::StrCat("cannot store the working directory ", package, ": ", e.what()));
      }
    }
    archive = it->second;
  }
  std::string id = request.submission_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return absl::UnavailableError("the jobs server is stopping");
    if (id.empty()) {
      do {
        id = NewSubmissionId();
      } while (records_.contains(id));
    } else if (records_.contains(id)) {
      return absl::AlreadyExistsError(absl::StrCat("a job with submission_id '", id,
                                                   "' already exists (status ",
                                                   JobStatusName(records_[id].status), ")"));
    }
    request.submission_id = id;
    records_[id] = NewRecord(request, NowMs());
    order_.push_back(id);
    ++version_;
  }
  ::close(::open(LogPath(id).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  SupervisorSpec spec{id, request.entrypoint, options_.head_address, request.runtime_env.env_vars,
                      archive.has_value()};
  try {
    auto creator = raio::Actor(JobSupervisor::Create)
                       .SetResources(request.Resources())
                       .SetMaxConcurrency(4)
                       .SetMaxRestarts(0);
    ActorHandle<JobSupervisor> handle =
        archive ? creator.Remote(spec, *archive) : creator.Remote(spec, no_archive);
    auto poll =
        handle.Task(&JobSupervisor::Poll).Remote(uint64_t{0}, kSupervisorStarting, int64_t{200});
    std::lock_guard<std::mutex> l(mu_);
    Active a;
    a.supervisor = handle;
    a.poll = poll;
    active_.emplace(id, std::move(a));
    cv_.notify_all();
  } catch (const std::exception& e) {
    Finish(id, JobStatus::kFailed,
           absl::StrCat("the job's supervisor could not be created: ", e.what()), std::nullopt,
           "JOB_SUPERVISOR_ACTOR_START_FAILURE");
    return id;
  }
  Persist();
  return id;
}

void JobManager::MonitorLoop() {
  for (;;) {
    std::vector<std::string> ids;
    std::vector<ObjectRef<SupervisorPoll>> refs;
    {
      std::unique_lock<std::mutex> l(mu_);
      if (stopping_) return;
      for (auto& [id, a] : active_) {
        if (a.poll) {
          ids.push_back(id);
          refs.push_back(*a.poll);
        }
      }
      if (refs.empty()) {
        cv_.wait_for(l, std::chrono::milliseconds(200));
        continue;
      }
    }
    std::vector<bool> ready(refs.size(), false);
    try {
      auto res = raio::Wait(refs, 1, std::chrono::milliseconds(100));
      for (const auto& r : res.ready) {
        for (size_t i = 0; i < refs.size(); ++i) {
          if (refs[i].ID() == r.ID()) ready[i] = true;
        }
      }
    } catch (const std::exception& e) {
      spdlog::warn("jobs: waiting for supervisors failed: {}", e.what());
      continue;
    }
    for (size_t i = 0; i < refs.size(); ++i) {
      if (ready[i]) OnPoll(ids[i], refs[i]);
    }
  }
}

void JobManager::OnPoll(const std::string& id, const ObjectRef<SupervisorPoll>& ref) {
  SupervisorPoll p;
  try {
    p = ref.Get();
  } catch (const std::exception& e) {
    bool stopped = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = active_.find(id);
      if (it == active_.end()) return;
      stopped = it->second.stop_requested;
    }
    if (stopped) {
      Finish(id, JobStatus::kStopped, "Job was intentionally stopped.", std::nullopt, "");
    } else {
      Finish(id, JobStatus::kFailed, absl::StrCat("the job's supervisor died: ", e.what()),
             std::nullopt, "JOB_SUPERVISOR_ACTOR_DIED");
    }
    return;
  }
  // The log copy grows first, so that a reader who sees the job terminal has all of it.
  if (!p.logs.empty()) {
    std::ofstream out(LogPath(id), std::ios::binary | std::ios::app);
    out.write(p.logs.data(), static_cast<std::streamsize>(p.logs.size()));
  }
  ActorHandle<JobSupervisor> supervisor;
  bool stop_requested = false;
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = active_.find(id);
    auto rec = records_.find(id);
    if (it == active_.end() || rec == records_.end()) return;
    Active& a = it->second;
    a.offset = p.next_offset;
    a.known_state = p.state;
    stop_requested = a.stop_requested;
    supervisor = a.supervisor;
    if (p.state >= kSupervisorRunning && rec->second.status == JobStatus::kPending &&
        p.start_error.empty()) {
      rec->second.status = JobStatus::kRunning;
      rec->second.message = "Job is currently running.";
      rec->second.start_time_ms = p.start_time_ms;
      rec->second.driver_node_id = p.node_id;
      ++version_;
      changed = true;
    }
    a.poll.reset();
  }
  if (p.state != kSupervisorExited || p.more_logs) {
    // The next long poll, submitted outside the lock.
    std::optional<ObjectRef<SupervisorPoll>> next;
    try {
      next = supervisor.Task(&JobSupervisor::Poll).Remote(p.next_offset, p.state, int64_t{200});
    } catch (const std::exception& e) {
      Finish(id, JobStatus::kFailed, absl::StrCat("cannot reach the job's supervisor: ", e.what()),
             std::nullopt, "JOB_SUPERVISOR_ACTOR_DIED");
      return;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = active_.find(id); it != active_.end()) it->second.poll = std::move(next);
    }
    if (changed) Persist();
    return;
  }
  if (!p.start_error.empty()) {
    if (stop_requested) {
      Finish(id, JobStatus::kStopped, "Job was intentionally stopped.", std::nullopt, "");
    } else {
      Finish(id, JobStatus::kFailed,
             absl::StrCat("the entrypoint could not be started: ", p.start_error), std::nullopt,
             "JOB_ENTRYPOINT_COMMAND_START_ERROR");
    }
  } else if (stop_requested) {
    Finish(id, JobStatus::kStopped, "Job was intentionally stopped.", p.exit_code, "");
  } else if (p.exit_code == 0) {
    Finish(id, JobStatus::kSucceeded, "Job finished successfully.", 0, "");
  } else {
    std::string why = p.exit_code == 127   ? " (the shell did not find the command)"
                      : p.exit_code == 126 ? " (the command is not executable)"
                      : p.exit_code < 0    ? absl::StrCat(" (killed by signal ", -p.exit_code, ")")
                                           : "";
    Finish(id, JobStatus::kFailed,
           absl::StrCat("Job entrypoint command failed with exit code ", p.exit_code, why,
                        ", last available logs:\n", LastLogLines(id, 2000)),
           p.exit_code, "JOB_ENTRYPOINT_COMMAND_ERROR");
  }
  try {
    supervisor.Kill();
  } catch (const std::exception& e) {
    spdlog::warn("jobs: cannot end the supervisor of {}: {}", id, e.what());
  }
}

std::string JobManager::LastLogLines(const std::string& id, size_t max_bytes) const {
  std::ifstream in(LogPath(id), std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  const std::streamoff from =
      std::max<std::streamoff>(0, size - static_cast<std::streamoff>(max_bytes));
  in.seekg(from);
  std::string tail(static_cast<size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  if (from > 0) {
    if (auto nl = tail.find('\n'); nl != std::string::npos) tail = tail.substr(nl + 1);
  }
  return tail;
}

void JobManager::Finish(const std::string& id, JobStatus status, std::string message,
                        std::optional<int> exit_code, std::string error_type) {
  {
    std::lock_guard<std::mutex> l(mu_);
    active_.erase(id);
    auto rec = records_.find(id);
    if (rec == records_.end() || IsTerminal(rec->second.status)) return;
    rec->second.status = status;
    rec->second.message = std::move(message);
    rec->second.driver_exit_code = exit_code;
    rec->second.error_type = std::move(error_type);
    rec->second.end_time_ms = NowMs();
    ++version_;
  }
  Persist();
}

void JobManager::Persist() {
  nlohmann::json all = nlohmann::json::array();
  uint64_t version = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    version = version_;
    for (const std::string& id : order_) all.push_back(records_[id].ToJson());
  }
  std::lock_guard<std::mutex> l(persist_mu_);
  if (version <= persisted_version_) return;  // a newer table was written meanwhile
  absl::Status s =
      WriteFileAtomically(options_.state_dir + "/jobs.json",
                          all.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (!s.ok()) {
    spdlog::warn("jobs: cannot persist the job table: {}", std::string(s.message()));
    return;
  }
  persisted_version_ = version;
}

absl::StatusOr<JobRecord> JobManager::Get(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return absl::NotFoundError(absl::StrCat("no job with id '", id, "'"));
  return it->second;
}

std::vector<JobRecord> JobManager::List() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<JobRecord> out;
  out.reserve(order_.size());
  for (const std::string& id : order_) out.push_back(records_[id]);
  return out;
}

absl::StatusOr<LogChunk> JobManager::ReadLogs(const std::string& id, uint64_t offset,
                                              uint64_t max_bytes) {
  bool terminal = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) {
      return absl::NotFoundError(absl::StrCat("no job with id '", id, "'"));
    }
    terminal = IsTerminal(it->second.status);
  }
  LogChunk c;
  c.next_offset = offset;
  std::ifstream in(LogPath(id), std::ios::binary | std::ios::ate);
  const uint64_t size = in ? static_cast<uint64_t>(in.tellg()) : 0;
  if (size > offset) {
    in.seekg(static_cast<std::streamoff>(offset));
    c.data.resize(std::min(size - offset, max_bytes));
    in.read(c.data.data(), static_cast<std::streamsize>(c.data.size()));
    c.data.resize(static_cast<size_t>(in.gcount()));
    c.next_offset = offset + c.data.size();
  }
  c.complete = terminal && c.next_offset >= size;
  return c;
}

absl::StatusOr<bool> JobManager::Stop(const std::string& id) {
  ActorHandle<JobSupervisor> supervisor;
  bool started = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto rec = records_.find(id);
    if (rec == records_.end()) {
      return absl::NotFoundError(absl::StrCat("no job with id '", id, "'"));
    }
    if (IsTerminal(rec->second.status)) return false;
    auto it = active_.find(id);
    if (it == active_.end()) return false;  // finishing right now
    if (it->second.stop_requested) return true;
    it->second.stop_requested = true;
    supervisor = it->second.supervisor;
    started = it->second.known_state != kSupervisorStarting;
  }
  try {
    if (started) {
      // Fire and forget: the supervisor escalates to SIGKILL by itself; the monitor sees
      // the exit.
      (void)supervisor.Task(&JobSupervisor::Stop)
          .Remote(static_cast<int64_t>(options_.stop_grace.count()));
    } else {
      // Not placed or not started yet: the supervisor goes, and the job with it.
      supervisor.Kill();
      Finish(id, JobStatus::kStopped, "Job was intentionally stopped.", std::nullopt, "");
    }
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot stop job '", id, "': ", e.what()));
  }
  return true;
}

absl::Status JobManager::Delete(const std::string& id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto rec = records_.find(id);
    if (rec == records_.end()) {
      return absl::NotFoundError(absl::StrCat("no job with id '", id, "'"));
    }
    if (!IsTerminal(rec->second.status)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job '", id, "' is ", JobStatusName(rec->second.status),
                       "; only a job in a terminal state (STOPPED, SUCCEEDED, FAILED) can be "
                       "deleted: stop it first"));
    }
    records_.erase(rec);
    order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
    ++version_;
  }
  ::unlink(LogPath(id).c_str());
  Persist();
  return absl::OkStatus();
}

bool JobManager::HasPackage(const std::string& name) {
  std::error_code ec;
  return IsValidPackageName(name) && fs::is_regular_file(PackagePath(name), ec);
}

absl::Status JobManager::PutPackage(const std::string& name, std::string_view bytes) {
  if (!IsValidPackageName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("bad package name '", name, "'"));
  }
  if (bytes.size() > options_.max_package_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the package is ", bytes.size(), " bytes, over the limit of ",
                     options_.max_package_bytes, " bytes (raio-jobs --max-package-bytes)"));
  }
  if (std::optional<std::string> want = DigestInName(name)) {
    if (std::string got = Sha256Hex(bytes); got != *want) {
      return absl::InvalidArgumentError(
          absl::StrCat("package ", name, " does not match its content (SHA-256 ", got, ")"));
    }
  }
  return WriteFileAtomically(PackagePath(name), bytes);
}

}  // namespace raio::jobs
