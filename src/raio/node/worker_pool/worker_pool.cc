#include "raio/node/worker_pool/worker_pool.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/common/process.h"
#include "raio/common/running_task.h"

extern char** environ;

namespace raio::node {

WorkerPool::WorkerPool(boost::asio::io_context& io, Options options)
    : io_(io),
      session_dir_(std::move(options.session_dir)),
      node_socket_path_(std::move(options.node_socket_path)),
      node_ip_(std::move(options.node_ip)),
      node_has_gpus_(options.node_has_gpus),
      node_mask_(std::move(options.node_mask)) {}

WorkerPool::~WorkerPool() { KillAll(); }

void WorkerPool::AddJob(JobId job, JobConfig config) { jobs_[job] = std::move(config); }

absl::Status WorkerPool::StartWorker(const WorkerKey& key) {
  const JobId job = key.job;
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("unknown job ", job));
  const JobConfig& cfg = it->second;
  WorkerId id = RandomId<WorkerId>();

  // On a GPU node every worker sees exactly its device set ("" for none); set here, at
  // spawn, because CUDA reads it once per process.
  const bool set_devices = node_has_gpus_ || !key.gpus.empty();
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (kv.starts_with("RAIO_")) continue;  // wiring below; config as the node has it
    if (kv.starts_with("LD_LIBRARY_PATH=") && !cfg.ld_library_path.empty()) continue;
    if (kv.starts_with("CUDA_VISIBLE_DEVICES=") && set_devices) continue;
    if (!cfg.env_vars.empty() && cfg.env_vars.contains(std::string(kv.substr(0, kv.find('='))))) {
      continue;  // the job's value below
    }
    env.emplace_back(kv);
  }
  for (const auto& [name, value] : cfg.env_vars) {
    if (!name.starts_with("RAIO_")) env.push_back(absl::StrCat(name, "=", value));
  }
  if (set_devices) env.push_back("CUDA_VISIBLE_DEVICES=" + VisibleDevices(key.gpus, node_mask_));
  env.push_back("RAIO_WORKER_MODE=1");
  env.push_back("RAIO_NODE_SOCKET=" + node_socket_path_);
  env.push_back("RAIO_NODE_IP=" + node_ip_);
  env.push_back("RAIO_WORKER_ID=" + id.Hex());
  env.push_back(absl::StrCat("RAIO_JOB_ID=", job));
  env.push_back("RAIO_SESSION_DIR=" + session_dir_);
  if (!cfg.ns.empty()) env.push_back("RAIO_NAMESPACE=" + cfg.ns);
  if (!cfg.ld_library_path.empty()) env.push_back("LD_LIBRARY_PATH=" + cfg.ld_library_path);
  // The cluster's configuration, as this node applied it (defaults need no variable).
  for (std::string& var : config::EnvironmentForWorkers()) env.push_back(std::move(var));
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = cfg.executable;
  std::vector<char*> argv{exe.data(), nullptr};

  // Its stderr goes through the node (forwarded as it comes, its tail kept for errors).
  int err_pipe[2] = {-1, -1};
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("cannot start worker: pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  if (!cfg.working_dir.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, cfg.working_dir.c_str());
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Workers get default signal dispositions and an empty mask, whatever the parent had.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(err_pipe[0]);
    return absl::InternalError(
        absl::StrCat("cannot start worker '", exe, "': ", std::strerror(rc)));
  }
  WorkerProcess& w = workers_[id];
  w.err = WorkerStderr::Start(io_, err_pipe[0]);
  w.id = id;
  w.pid = pid;
  w.job = job;
  w.gpus = key.gpus;
  w.state = WorkerProcess::State::kStarting;
  w.started = std::chrono::steady_clock::now();
  RAIO_LOG_DEBUG(
      "started worker {} pid {} for job {}{}", id.Hex(), pid, job,
      set_devices ? absl::StrCat(" with GPUs [", absl::StrJoin(key.gpus, ","), "]") : "");
  return absl::OkStatus();
}

absl::StatusOr<WorkerProcess*> WorkerPool::OnRegistered(const WorkerId& id, pid_t pid,
                                                        std::shared_ptr<rpc::Connection> conn,
                                                        proto::Address address) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.state != WorkerProcess::State::kStarting) {
    return absl::NotFoundError("no worker with this id is starting on this node");
  }
  WorkerProcess& w = it->second;
  if (w.pid != pid)
    RAIO_LOG_WARN("worker {} registered with pid {}, spawned as {}", id.Hex(), pid, w.pid);
  w.conn = std::move(conn);
  w.address = std::move(address);
  w.state = WorkerProcess::State::kIdle;
  start_failures_.erase(w.job);
  return &w;
}

WorkerProcess* WorkerPool::PopIdle(const WorkerKey& key, bool for_actor) {
  for (auto& [id, w] : workers_) {
    if (w.state == WorkerProcess::State::kIdle && w.job == key.job && w.gpus == key.gpus &&
        !(for_actor && w.ran_tasks)) {
      w.state = WorkerProcess::State::kLeased;
      if (!for_actor) w.ran_tasks = true;
      return &w;
    }
  }
  return nullptr;
}

void WorkerPool::NoteStartFailure(const WorkerProcess& w, const std::string& how, bool not_loaded) {
  StartFailures& f = start_failures_[w.job];
  ++f.count;
  std::string tail;
  if (w.err) {
    w.err->Drain();
    tail = w.err->Tail();
  }
  f.last = absl::StrCat(
      f.count, f.count == 1 ? " worker process" : " worker processes", " of job ", w.job,
      " in a row died while starting, before registering with the node (",
      not_loaded ? "exit status 127: the executable could not be loaded here, e.g. a shared "
                   "library it links is missing on this host"
                 : "the job's executable runs in worker mode: does it reach "
                   "raio::Init(argc, argv) at the top of main?",
      "); the last, ", how,
      tail.empty() ? ", printed nothing to stderr" : ", printed to stderr last:\n", tail);
}

std::vector<std::pair<JobId, std::string>> WorkerPool::TakeStartFailures(int threshold) {
  std::vector<std::pair<JobId, std::string>> out;
  for (auto it = start_failures_.begin(); it != start_failures_.end();) {
    if (it->second.count >= threshold) {
      out.emplace_back(it->first, std::move(it->second.last));
      it = start_failures_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void WorkerPool::MakeIdle(WorkerProcess* worker) {
  worker->state = WorkerProcess::State::kIdle;
  worker->lease = LeaseId();
}

int WorkerPool::NumStarting(const WorkerKey& key) const {
  int n = 0;
  for (const auto& [id, w] : workers_) {
    if (w.state == WorkerProcess::State::kStarting && w.job == key.job && w.gpus == key.gpus) ++n;
  }
  return n;
}

int WorkerPool::NumStarting() const {
  int n = 0;
  for (const auto& [id, w] : workers_) n += w.state == WorkerProcess::State::kStarting;
  return n;
}

WorkerProcess* WorkerPool::Find(const WorkerId& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

void WorkerPool::Kill(const WorkerId& id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  // Its task and owner-service sockets (a killed process cannot remove them itself).
  ::unlink(absl::StrCat(session_dir_, "/w-", id.Hex(), ".sock").c_str());
  ::unlink(absl::StrCat(session_dir_, "/o-", id.Hex(), ".sock").c_str());
  if (it->second.pid > 0) {
    ::kill(it->second.pid, SIGKILL);
    zombies_.push_back({it->second.pid, id, RunningTask(id)});
  }
  ::unlink(RunningTaskPath(session_dir_, id.Hex()).c_str());
  if (it->second.conn) it->second.conn->Close(absl::CancelledError("worker killed"));
  if (it->second.err) {
    it->second.err->Drain();
    it->second.err->Close();
  }
  workers_.erase(it);
}

void WorkerPool::RemoveJob(JobId job, const std::set<WorkerId>& keep, bool keep_job) {
  std::vector<WorkerId> ids;
  for (const auto& [id, w] : workers_) {
    if (w.job == job && keep.count(id) == 0) ids.push_back(id);
  }
  for (const auto& id : ids) Kill(id);
  if (!keep_job) jobs_.erase(job);
}

void WorkerPool::KillAll() {
  std::vector<WorkerId> ids;
  for (const auto& [id, w] : workers_) ids.push_back(id);
  for (const auto& id : ids) Kill(id);
  for (const auto& z : zombies_) ::waitpid(z.pid, nullptr, 0);
  zombies_.clear();
}

bool WorkerPool::IsReaped(pid_t pid) const {
  // Only the zombie list: a live worker that got the same pid since must not count.
  return std::none_of(zombies_.begin(), zombies_.end(),
                      [pid](const auto& z) { return z.pid == pid; });
}

bool WorkerPool::IsUnreaped(const WorkerId& worker) const {
  return std::any_of(zombies_.begin(), zombies_.end(),
                     [&worker](const auto& z) { return z.worker == worker; });
}

std::optional<std::string> WorkerPool::RunningTask(const WorkerId& id) const {
  return ReadRunningTask(RunningTaskPath(session_dir_, id.Hex()));
}

std::vector<WorkerId> WorkerPool::Reap() {
  std::vector<WorkerId> gone;
  auto now = std::chrono::steady_clock::now();
  for (auto& [id, w] : workers_) {
    int status = 0;
    pid_t r = ::waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid) {
      RAIO_LOG_INFO("worker {} (pid {}) exited with status {}", id.Hex(), w.pid, status);
      if (w.state == WorkerProcess::State::kStarting)
        NoteStartFailure(w, DescribeExit(w.pid, status),
                         WIFEXITED(status) && WEXITSTATUS(status) == 127);
      exits_.push_back({id, w.pid, status, RunningTask(id)});
      w.pid = -1;
      gone.push_back(id);
    } else if (w.state == WorkerProcess::State::kStarting &&
               now - w.started > config::worker_start_timeout_ms()) {
      RAIO_LOG_WARN("worker {} did not register in time; killing it", id.Hex());
      NoteStartFailure(
          w, absl::StrCat("pid ", w.pid, " did not register within ",
                          config::worker_start_timeout_ms().count(), " ms and was killed"));
      gone.push_back(id);
    }
  }
  for (auto it = zombies_.begin(); it != zombies_.end();) {
    int status = 0;
    pid_t r = ::waitpid(it->pid, &status, WNOHANG);
    if (r == it->pid) exits_.push_back({it->worker, it->pid, status, it->running_task});
    it = (r == it->pid || r < 0) ? zombies_.erase(it) : it + 1;
  }
  return gone;
}

}  // namespace raio::node
