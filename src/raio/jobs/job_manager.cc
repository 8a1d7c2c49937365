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

JobManager::JobManager(JobManagerOptions options, std::unique_ptr<JobStore> store)
    : options_(std::move(options)), store_(std::move(store)) {}

absl::StatusOr<std::unique_ptr<JobManager>> JobManager::Create(JobManagerOptions options,
                                                               std::unique_ptr<JobStore> store) {
  std::error_code ec;
  for (const char* sub : {"", "/packages"}) {
    fs::create_directories(options.state_dir + sub, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot create ", options.state_dir, sub, ": ", ec.message()));
    }
  }
  if (store == nullptr) {
    auto files = FileJobStore::Create(options.state_dir);
    if (!files.ok()) return files.status();
    store = std::move(*files);
  }
  std::unique_ptr<JobManager> m(new JobManager(std::move(options), std::move(store)));
  if (absl::Status s = m->Load(); !s.ok()) return s;
  return m;
}

JobManager::~JobManager() { Stop(); }

absl::Status JobManager::Load() {
  auto records = store_->LoadRecords();
  if (!records.ok()) return records.status();
  std::vector<std::string> changed;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (JobRecord& r : *records) {
      if (!IsTerminal(r.status)) {
        // Its supervisor ended with the server that ran it.
        r.message = absl::StrCat("the ", std::string(store_->RestartedWhat()),
                                 " restarted while the job was ", JobStatusName(r.status),
                                 "; the job ended with it");
        r.status = JobStatus::kFailed;
        r.error_type = "JOB_SUPERVISOR_ACTOR_DIED";
        r.end_time_ms = NowMs();
        changed.push_back(r.submission_id);
      }
      if (!records_.contains(r.submission_id)) order_.push_back(r.submission_id);
      records_[r.submission_id] = std::move(r);
    }
  }
  for (const std::string& id : changed) {
    if (absl::Status s = Persist(id); !s.ok()) return s;
  }
  std::lock_guard<std::mutex> l(mu_);
  store_connections_ = store_->Connections();
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
  }
  // Recorded before it runs: a job the store does not hold is not started.
  absl::Status stored = store_->ResetLog(id);
  if (stored.ok()) stored = Persist(id);
  if (!stored.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    records_.erase(id);
    dirty_.erase(id);
    order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
    return stored;
  }
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
  return id;
}

void JobManager::MonitorLoop() {
  auto next_retry = std::chrono::steady_clock::now();
  for (;;) {
    // What the store refused is written again at most every 200 ms, so a store that is
    // down costs no busy loop.
    if (std::chrono::steady_clock::now() >= next_retry) {
      next_retry = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      RetryStore();
    }
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
  HandlePoll(id, std::move(p));
}

void JobManager::RetryStore() {
  WriteDirtyRecords();
  std::vector<std::pair<std::string, SupervisorPoll>> unstored;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, a] : active_) {
      if (a.unstored) {
        unstored.emplace_back(id, std::move(*a.unstored));
        a.unstored.reset();
      }
    }
  }
  for (auto& [id, p] : unstored) HandlePoll(id, std::move(p), /*retry=*/true);
}

void JobManager::WriteDirtyRecords() {
  const uint64_t connections = store_->Connections();
  std::vector<std::string> dirty;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (connections != store_connections_) {
      // A new connection may reach a new server that lost what the old one held.
      dirty_.insert(order_.begin(), order_.end());
      store_connections_ = connections;
    }
    dirty.assign(dirty_.begin(), dirty_.end());
  }
  for (const std::string& id : dirty) {
    if (!Persist(id).ok()) break;  // still down: the next round tries again
  }
}

absl::Status JobManager::CheckStore() {
  if (absl::Status s = store_->Check(); !s.ok()) return s;
  WriteDirtyRecords();
  return absl::OkStatus();
}

void JobManager::HandlePoll(const std::string& id, SupervisorPoll p, bool retry) {
  // The log copy grows first, so that a reader who sees the job terminal has all of it.
  // When the store refuses the bytes, nothing else of this answer is applied yet: the
  // monitor hands it back here (RetryStore) until the store takes them.
  if (!p.logs.empty()) {
    const uint64_t from = p.next_offset - std::min<uint64_t>(p.next_offset, p.logs.size());
    if (absl::Status s = store_->AppendLog(id, from, p.logs); !s.ok()) {
      if (!retry) {  // once per outage, not every 200 ms
        spdlog::warn("jobs: cannot store the log of {} (retrying): {}", id,
                     std::string(s.message()));
      }
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = active_.find(id); it != active_.end()) {
        it->second.poll.reset();
        it->second.unstored = std::move(p);
      }
      return;
    }
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
    if (changed) (void)Persist(id);  // a refused write is retried by the monitor
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
  auto size = store_->ReadLog(id, 0, 0);
  if (!size.ok()) return "";
  const uint64_t from = size->size - std::min<uint64_t>(size->size, max_bytes);
  auto log = store_->ReadLog(id, from, max_bytes);
  if (!log.ok()) return "";
  std::string tail = std::move(log->data);
  if (log->offset > 0) {
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
  }
  (void)Persist(id);  // a refused write is retried by the monitor
}

absl::Status JobManager::Persist(const std::string& id) {
  std::lock_guard<std::mutex> pl(persist_mu_);
  std::optional<JobRecord> record;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = records_.find(id);
    if (it == records_.end()) {  // deleted meanwhile
      dirty_.erase(id);
      return absl::OkStatus();
    }
    record = it->second;
  }
  absl::Status s = store_->PutRecord(*record);
  std::lock_guard<std::mutex> l(mu_);
  if (s.ok()) {
    dirty_.erase(id);
  } else {
    if (dirty_.empty()) {
      spdlog::warn("jobs: cannot store the record of {}: {}", id, std::string(s.message()));
    }
    dirty_.insert(id);
  }
  return s;
}

// Reads answer from the records in memory (the manager is their only writer), but only
// while the store answers: a jobs API whose storage is gone says so (503) rather than
// show what it cannot keep.
absl::StatusOr<JobRecord> JobManager::Get(const std::string& id) {
  if (absl::Status s = CheckStore(); !s.ok()) return s;
  std::lock_guard<std::mutex> l(mu_);
  auto it = records_.find(id);
  if (it == records_.end()) return absl::NotFoundError(absl::StrCat("no job with id '", id, "'"));
  return it->second;
}

absl::StatusOr<std::vector<JobRecord>> JobManager::List() {
  if (absl::Status s = CheckStore(); !s.ok()) return s;
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
  auto log = store_->ReadLog(id, offset, max_bytes);
  if (!log.ok()) return log.status();
  LogChunk c;
  // A store that dropped the log's front starts at its oldest byte kept.
  c.next_offset = std::max(offset, log->offset) + log->data.size();
  c.skipped = log->offset > offset ? log->offset - offset : 0;
  c.data = std::move(log->data);
  c.complete = terminal && c.next_offset >= log->size;
  return c;
}

absl::StatusOr<bool> JobManager::Stop(const std::string& id) {
  if (absl::Status s = CheckStore(); !s.ok()) return s;
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
  // Held across the store's deletion, so that no write of the record follows it.
  std::lock_guard<std::mutex> pl(persist_mu_);
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
  }
  // A terminal record no longer changes: it goes from the store first, then from memory.
  if (absl::Status s = store_->DeleteJob(id); !s.ok()) return s;
  std::lock_guard<std::mutex> l(mu_);
  records_.erase(id);
  dirty_.erase(id);
  order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
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
    return absl::ResourceExhaustedError(absl::StrCat(
        "the package is ", bytes.size(), " bytes, over the limit of ", options_.max_package_bytes,
        " bytes (RAIO_JOBS_MAX_PACKAGE_BYTES in the environment of raio start --head, "
        "or raio-jobs --max-package-bytes)"));
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
