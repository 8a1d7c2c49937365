#include "harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <mutex>
#include <thread>

#include "raio/testkit/time_scale.h"

namespace raio_test {

namespace {

// The guard's death signal handler: ends the guard's whole process group, itself included.
void KillOwnGroup(int /*sig*/) { ::kill(0, SIGKILL); }

// Exits the way `status` (from waitpid) says a process ended: the same exit code, or the
// same signal (without a core file: the command's own crash already made one if any).
[[noreturn]] void ExitAs(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    struct rlimit no_core {};
    ::setrlimit(RLIMIT_CORE, &no_core);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
    sigset_t only;
    ::sigemptyset(&only);
    ::sigaddset(&only, sig);
    ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
    ::kill(::getpid(), sig);
    _exit(128 + sig);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
}

// The guards of SpawnCommand that nobody has waited for yet.
std::mutex spawned_mu;
std::vector<pid_t> spawned;  // guarded by spawned_mu

}  // namespace

void BecomeGuardedChild(pid_t parent) {
  ::setpgid(0, 0);
  struct sigaction on_death {};
  on_death.sa_handler = KillOwnGroup;
  ::sigaction(SIGTERM, &on_death, nullptr);
  // The forking thread may block SIGTERM (a thread that waits for signals does); the guard
  // must get it. The command gets the thread's mask back, as popen's child would have.
  sigset_t term, mask;
  ::sigemptyset(&term);
  ::sigaddset(&term, SIGTERM);
  ::sigprocmask(SIG_UNBLOCK, &term, &mask);
  // The death signal goes to the guard, not to the command: /bin/sh forks what it runs, a
  // death signal does not pass to children, so only a kill of the group reaches them all.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) _exit(1);  // the test died before prctl
  // _Fork runs no atfork handlers, which could wait for locks that other threads of the
  // test held when it forked this child.
  const pid_t command = ::_Fork();
  if (command < 0) _exit(127);
  if (command == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGTERM, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    return;
  }
  // The guard never execs, so O_CLOEXEC never closes what it inherited: without this it
  // would hold the test's descriptors (other threads' RunCommand pipes, a driver's sockets)
  // for as long as its command runs, and another RunCommand would not see its output end.
  ::close_range(3, ~0U, 0);
  int status = 0;
  while (::waitpid(command, &status, 0) < 0) {
    if (errno != EINTR) _exit(127);
  }
  ExitAs(status);
}

CommandResult RunCommand(const std::string& command, bool merge_stderr,
                         std::chrono::milliseconds timeout) {
  CommandResult r;
  const std::chrono::milliseconds limit = raio::testkit::Scaled(timeout);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return r;
  // As with popen(command + redirection) before: the redirection is part of the script, so
  // it applies to the script's last command.
  std::string script = command + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  char sh[] = "sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, script.data(), nullptr};
  const pid_t self = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    BecomeGuardedChild(self);
    if (::dup2(fds[1], STDOUT_FILENO) < 0) _exit(127);
    ::execv("/bin/sh", argv);
    _exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return r;
  }
  ::setpgid(pid, pid);  // also here: the group exists before any kill of it below
  auto left_ms = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return std::clamp<long long>(left.count(), 0, INT_MAX);
  };
  bool timed_out = false;
  std::array<char, 4096> buf;
  for (;;) {
    const long long left = left_ms();
    if (left == 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fds[0], buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the end of the output (or an error)
    r.output.append(buf.data(), static_cast<size_t>(n));
  }
  ::close(fds[0]);
  // The output can end before the shell does (it closed its standard output): wait for the
  // shell within the same deadline.
  int status = 0;
  pid_t reaped = 0;
  for (int nap_ms = 1; !timed_out; nap_ms = std::min(nap_ms * 2, 20)) {
    reaped = ::waitpid(pid, &status, WNOHANG);
    if (reaped != 0 && !(reaped < 0 && errno == EINTR)) break;
    if (left_ms() == 0) {
      timed_out = true;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(nap_ms));
    }
  }
  if (timed_out) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.output += "\n[RunCommand: timed out after " + std::to_string(limit.count()) +
                " ms; its process group was killed]\n";
    return r;
  }
  r.exit_code = reaped == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

pid_t SpawnCommand(const std::string& command) {
  {
    std::lock_guard<std::mutex> lock(spawned_mu);
    std::erase_if(spawned, [](pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) != 0; });
  }
  std::string script = command;
  char sh[] = "sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, script.data(), nullptr};
  const pid_t self = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    BecomeGuardedChild(self);
    ::execv("/bin/sh", argv);
    _exit(127);
  }
  if (pid < 0) return -1;
  ::setpgid(pid, pid);
  std::lock_guard<std::mutex> lock(spawned_mu);
  spawned.push_back(pid);
  return pid;
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + raio::testkit::Scaled(timeout);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

std::set<std::string> DevShmEntries() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

std::vector<std::string> NewRaioShmEntries(const std::set<std::string>& before, pid_t pid) {
  const std::string old_store = "raio-store-";
  const std::string of_pid = old_store + std::to_string(pid) + "-";
  std::vector<std::string> added;
  for (const std::string& name : DevShmEntries()) {
    if (before.count(name) || name.find("raio") == std::string::npos) continue;
    if (name.rfind(old_store, 0) == 0 && name.rfind(of_pid, 0) != 0) continue;
    added.push_back(name);
  }
  return added;
}

bool HoldsObjectStore(pid_t pid) {
  std::error_code ec;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code link_ec;
    auto target = std::filesystem::read_symlink(e.path(), link_ec);
    if (!link_ec && target.string().rfind("/memfd:raio-object-store", 0) == 0) return true;
  }
  return false;
}

bool ProcessGone(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  if (n <= 0) return true;
  const std::string stat(buf, static_cast<size_t>(n));
  const auto paren = stat.rfind(')');
  return paren != std::string::npos && stat.compare(paren + 2, 1, "Z") == 0;
}

}  // namespace raio_test
