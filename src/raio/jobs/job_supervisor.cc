#include "raio/jobs/job_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/jobs/archive.h"

extern char** environ;

namespace raio::jobs {

namespace {

constexpr uint64_t kMaxPollBytes = 1u << 20;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Where this node keeps jobs' directories and logs: its session directory (removed when
// the node stops), which the node gives its workers.
std::string NodeJobsDir() {
  const char* session = std::getenv("RAIO_SESSION_DIR");
  return absl::StrCat(session != nullptr && *session ? session : "/tmp", "/submitted_jobs");
}

// What the guard reports through its pipe when the entrypoint did not start.
enum StartFailure : int { kFailedChdir = 1, kFailedExec = 2, kFailedFork = 3 };

void ResetSignals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// The guard: the first child of the supervisor, leader of the job's process group. It
// runs the entrypoint's shell in its group and waits for it; when the supervisor dies
// (SIGKILL, `raio stop`) its parent-death signal makes it SIGKILL the whole group, and
// when the shell ends it SIGKILLs what the shell left in the group, then exits as the
// shell did. Between fork and exec: async-signal-safe calls only.
// The guard takes its signals synchronously (blocked, then sigwaitinfo), with no handler:
// a handler in a child forked from a multi-threaded process did not run under
// ThreadSanitizer, which defers handlers to points that a guard blocked in waitpid never
// reaches.
[[noreturn]] void GuardMain(pid_t parent, pid_t parent_pgrp, int null_fd, int log_fd, int report_fd,
                            const char* dir, char* const argv[], char* const envp[]) {
  ::setpgid(0, 0);
  const pid_t guard = ::getpid();
  ResetSignals();
  // The group gets Stop's SIGTERM (and a terminal's signals): for the job, not the guard.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE}) ::sigaction(sig, &ignore, nullptr);
  // SIGUSR2 (the parent-death signal) and SIGCHLD (the shell's end) wait, blocked, for
  // sigwaitinfo below; the shell unblocks them (ResetSignals).
  sigset_t waited;
  sigemptyset(&waited);
  sigaddset(&waited, SIGUSR2);
  sigaddset(&waited, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &waited, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGUSR2);
  if (::getppid() != parent) _exit(125);  // the supervisor died before the line above
  pid_t shell = ::fork();
  if (shell == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != guard) _exit(125);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ResetSignals();
    if (::chdir(dir) != 0) {
      int failure[2] = {kFailedChdir, errno};
      (void)!::write(report_fd, failure, sizeof(failure));
      _exit(126);
    }
    ::execve(argv[0], argv, envp);
    int failure[2] = {kFailedExec, errno};
    (void)!::write(report_fd, failure, sizeof(failure));
    _exit(127);
  }
  if (shell < 0) {
    int failure[2] = {kFailedFork, errno};
    (void)!::write(report_fd, failure, sizeof(failure));
    _exit(125);
  }
  if (report_fd >= 0) ::close(report_fd);
  int status = 0;
  while (true) {
    const pid_t ended = ::waitpid(shell, &status, WNOHANG);
    if (ended == shell || (ended < 0 && errno != EINTR)) break;
    siginfo_t info{};
    if (::sigwaitinfo(&waited, &info) == SIGUSR2 && ::getppid() != parent) {
      ::kill(-guard, SIGKILL);  // the supervisor died: the job's processes, and this guard
      _exit(137);
    }
  }
  // Out of the group (back into the supervisor's), then end what is left in it.
  ::setpgid(0, parent_pgrp);
  ::kill(-guard, SIGKILL);
  if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  struct rlimit no_core {
    0, 0
  };
  ::setrlimit(RLIMIT_CORE, &no_core);
  ResetSignals();
  ::kill(::getpid(), sig);
  _exit(128 + sig);
}

}  // namespace

JobSupervisor* JobSupervisor::Create(SupervisorSpec spec, std::vector<uint8_t> archive) {
  return new JobSupervisor(std::move(spec), std::move(archive));
}

JobSupervisor::JobSupervisor(SupervisorSpec spec, std::vector<uint8_t> archive)
    : spec_(std::move(spec)), archive_(std::move(archive)) {
  try {
    node_id_ = raio::GetNodeId();
  } catch (const std::exception&) {
  }
  const std::string base = NodeJobsDir();
  job_dir_ = absl::StrCat(base, "/", spec_.submission_id);
  log_path_ = absl::StrCat(base, "/", spec_.submission_id, ".log");
  if (::pipe2(wake_fds_, O_CLOEXEC | O_NONBLOCK) != 0) wake_fds_[0] = wake_fds_[1] = -1;
  // The log exists before Poll can be called, so that Poll always has a file to read.
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  log_write_fd_ =
      ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  log_fd_ = ::open(log_path_.c_str(), O_RDONLY | O_CLOEXEC);
  thread_ = std::thread([this] { Run(); });
}

JobSupervisor::~JobSupervisor() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closing_ = true;
    if (state_ == kSupervisorRunning && pid_ > 0) ::kill(-pid_, SIGKILL);
  }
  if (wake_fds_[1] >= 0) (void)!::write(wake_fds_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int fd : {log_fd_, wake_fds_[0], wake_fds_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

absl::Status JobSupervisor::Prepare() {
  std::error_code ec;
  std::filesystem::create_directories(job_dir_, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create the job directory ", job_dir_, ": ", ec.message()));
  }
  if (spec_.has_working_dir) {
    absl::Status s = UnpackArchive(
        std::string_view(reinterpret_cast<const char*>(archive_.data()), archive_.size()),
        job_dir_);
    archive_.clear();
    archive_.shrink_to_fit();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

void JobSupervisor::Run() {
  const int write_fd = log_write_fd_;
  absl::Status prepared =
      write_fd < 0 || log_fd_ < 0
          ? absl::InternalError(absl::StrCat("cannot create the job's log ", log_path_))
          : Prepare();
  if (!prepared.ok()) {
    if (write_fd >= 0) ::close(write_fd);
    std::lock_guard<std::mutex> l(mu_);
    start_error_ = std::string(prepared.message());
    state_ = kSupervisorExited;
    end_time_ms_ = NowMs();
    cv_.notify_all();
    return;
  }
  // Everything the child needs, made before fork (after it only async-signal-safe calls).
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (kv.starts_with("RAIO_")) continue;  // this worker's wiring, not the job's
    std::string_view name = kv.substr(0, kv.find('='));
    if (spec_.env_vars.contains(std::string(name))) continue;
    env.emplace_back(kv);
  }
  std::vector<std::string> names;
  for (const auto& [k, v] : spec_.env_vars) {
    env.push_back(absl::StrCat(k, "=", v));
    names.push_back(k);
  }
  env.push_back("RAIO_ADDRESS=" + spec_.head_address);
  if (!node_id_.empty()) env.push_back("RAIO_NODE_ID=" + node_id_);
  env.push_back("RAIO_JOB_SUBMISSION_ID=" + spec_.submission_id);
  // The driver's raio::Init forwards these to its workers on every node.
  if (!names.empty()) env.push_back("RAIO_JOB_ENV_VARS=" + absl::StrJoin(names, ","));
  if (spec_.has_working_dir) {
    // Its workers on other nodes get the working directory's files (job packages).
    std::vector<std::string> files;
    for (std::string& f : ListRegularFiles(job_dir_)) {
      if (f.find(':') == std::string::npos) files.push_back(std::move(f));
    }
    if (!files.empty()) env.push_back("RAIO_JOB_FILES=" + absl::StrJoin(files, ":"));
  }
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c", cmd = spec_.entrypoint;
  char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_before_start_ || closing_) {
      ::close(write_fd);
      start_error_ = "the job was stopped before its entrypoint started";
      state_ = kSupervisorExited;
      end_time_ms_ = NowMs();
      cv_.notify_all();
      return;
    }
  }
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  const pid_t parent_pgrp = ::getpgrp();
  const char* dir = job_dir_.c_str();
  // The guard's report of a failed chdir or exec: {stage, errno}. Close-on-exec, so a
  // started entrypoint holds no end of it.
  int report[2] = {-1, -1};
  if (::pipe2(report, O_CLOEXEC) != 0) report[0] = report[1] = -1;

  pid_t pid = ::fork();
  if (pid == 0)
    GuardMain(parent, parent_pgrp, null_fd, write_fd, report[1], dir, argv, envp.data());
  ::close(write_fd);
  if (null_fd >= 0) ::close(null_fd);
  if (report[1] >= 0) ::close(report[1]);
  if (pid < 0) {
    if (report[0] >= 0) ::close(report[0]);
    std::lock_guard<std::mutex> l(mu_);
    start_error_ = absl::StrCat("cannot start the entrypoint: fork: ", std::strerror(errno));
    state_ = kSupervisorExited;
    end_time_ms_ = NowMs();
    cv_.notify_all();
    return;
  }
  ::setpgid(pid, pid);  // also here: whichever runs first
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  {
    std::lock_guard<std::mutex> l(mu_);
    pid_ = pid;
    state_ = kSupervisorRunning;
    start_time_ms_ = NowMs();
    cv_.notify_all();
  }
  int wait_status = 0;
  for (;;) {
    int timeout = -1;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (kill_at_ms_ > 0)
        timeout = static_cast<int>(std::max<int64_t>(0, kill_at_ms_ - SteadyMs()));
      if (closing_) timeout = 0;
    }
    pollfd fds[2] = {{pidfd, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    int n = pidfd >= 0 ? ::poll(fds, 2, timeout < 0 ? 100 : std::min(timeout, 100)) : 0;
    if (pidfd < 0 && ::waitpid(pid, &wait_status, WNOHANG) == pid) break;
    if (n > 0 && (fds[1].revents & POLLIN)) {
      char buf[16];
      while (::read(wake_fds_[0], buf, sizeof(buf)) > 0) {
      }
    }
    if (::waitpid(pid, &wait_status, WNOHANG) == pid) break;
    std::lock_guard<std::mutex> l(mu_);
    if (closing_ || (kill_at_ms_ > 0 && SteadyMs() >= kill_at_ms_)) {
      ::kill(-pid, SIGKILL);
      kill_at_ms_ = 0;
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  // What the shell left running in its group ends with it (the guard did so already,
  // unless it was killed itself).
  ::kill(-pid, SIGKILL);
  int failure[2] = {0, 0};
  const bool start_failed =
      report[0] >= 0 && ::read(report[0], failure, sizeof(failure)) == sizeof(failure);
  if (report[0] >= 0) ::close(report[0]);
  std::lock_guard<std::mutex> l(mu_);
  if (start_failed) {
    start_error_ =
        failure[0] == kFailedChdir ? absl::StrCat("cannot enter the job directory ", job_dir_, ": ",
                                                  std::strerror(failure[1]))
        : failure[0] == kFailedExec
            ? absl::StrCat(
                  "cannot run /bin/sh (execve): ", std::strerror(failure[1]),
                  failure[1] == E2BIG ? " (the entrypoint and its environment are too long)" : "")
            : absl::StrCat("cannot start the entrypoint: fork: ", std::strerror(failure[1]));
  } else {
    has_exit_code_ = true;
    exit_code_ = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -WTERMSIG(wait_status);
  }
  state_ = kSupervisorExited;
  end_time_ms_ = NowMs();
  cv_.notify_all();
}

SupervisorPoll JobSupervisor::Poll(uint64_t offset, int known_state, int64_t wait_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(0, wait_ms));
  auto log_size = [this]() -> uint64_t {
    struct stat st {};
    return log_fd_ >= 0 && ::fstat(log_fd_, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  };
  SupervisorPoll p;
  {
    std::unique_lock<std::mutex> l(mu_);
    // The log only grows by the program's writes, which signal nothing: look every 20 ms.
    while (state_ == known_state && state_ != kSupervisorExited && log_size() <= offset &&
           std::chrono::steady_clock::now() < deadline) {
      cv_.wait_until(
          l, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(20)));
    }
    p.state = state_;
    p.has_exit_code = has_exit_code_;
    p.exit_code = exit_code_;
    p.start_error = start_error_;
    p.start_time_ms = start_time_ms_;
    p.end_time_ms = end_time_ms_;
  }
  p.node_id = node_id_;
  const uint64_t size = log_size();
  p.next_offset = offset;
  if (size > offset && log_fd_ >= 0) {
    p.logs.resize(std::min<uint64_t>(size - offset, kMaxPollBytes));
    ssize_t n = ::pread(log_fd_, p.logs.data(), p.logs.size(), static_cast<off_t>(offset));
    p.logs.resize(n > 0 ? static_cast<size_t>(n) : 0);
    p.next_offset = offset + p.logs.size();
    p.more_logs = p.next_offset < size;
  }
  return p;
}

bool JobSupervisor::Stop(int64_t grace_ms) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (state_ == kSupervisorStarting) {
      stop_before_start_ = true;
      return true;
    }
    if (state_ != kSupervisorRunning || pid_ <= 0) return false;
    ::kill(-pid_, SIGTERM);
    kill_at_ms_ = SteadyMs() + std::max<int64_t>(0, grace_ms);
  }
  if (wake_fds_[1] >= 0) (void)!::write(wake_fds_[1], "x", 1);
  return true;
}

}  // namespace raio::jobs

RAIO_REMOTE(raio::jobs::JobSupervisor::Create, &raio::jobs::JobSupervisor::Poll,
            &raio::jobs::JobSupervisor::Stop);
