#include "raio/common/process.h"

#include <cxxabi.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"

namespace raio {

namespace {

struct StatFields {
  char state = '?';
  uint64_t start_ticks = 0;
};

// Parses /proc/<pid>/stat: "pid (comm) state ppid ... starttime ...". comm may hold
// spaces and parentheses, so fields are counted from the last ')'.
std::optional<StatFields> ParseStat(const std::string& text) {
  std::size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(text.substr(close + 1));
  StatFields f;
  std::string skip;
  if (!(in >> f.state)) return std::nullopt;
  for (int field = 4; field < 22; ++field) {  // ppid (4) .. priority/nice/.. (21)
    if (!(in >> skip)) return std::nullopt;
  }
  if (!(in >> f.start_ticks)) return std::nullopt;
  return f;
}

// Reads and parses `proc_entry`/stat (proc_entry: /proc/<pid> or /proc/self); `*err`
// is errno when the file cannot be opened, else 0.
std::optional<StatFields> ReadStat(const std::string& proc_entry, int* err) {
  *err = 0;
  int fd = ::open((proc_entry + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *err = errno;
    return std::nullopt;
  }
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return ParseStat(text);
}

uint64_t AllocatedBytes(const struct stat& st) { return static_cast<uint64_t>(st.st_blocks) * 512; }

uint64_t TreeAllocatedBytes(const std::filesystem::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) total += AllocatedBytes(st);
  }
  return total;
}

}  // namespace

std::string SelfExecutablePath() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string Hostname() {
  char buf[HOST_NAME_MAX + 1] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

int DetectCpuCount() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int64_t DetectMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  return (pages > 0 && page_size > 0) ? static_cast<int64_t>(pages) * page_size : 0;
}

std::string Demangle(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  return (status == 0 && out) ? std::string(out.get()) : std::string(mangled);
}

std::string TempBase() {
  const char* env = std::getenv("TMPDIR");
  std::string base = env && *env ? env : "/tmp";
  // Unix socket paths inside must stay under 107 bytes: fall back to /tmp for long bases.
  if (base.size() > 48) base = "/tmp";
  return base;
}

std::optional<ProcessStamp> SelfProcessStamp() {
  int err = 0;
  std::optional<StatFields> f = ReadStat("/proc/self", &err);
  if (!f) return std::nullopt;
  return ProcessStamp{::getpid(), f->start_ticks};
}

std::optional<ProcessStamp> ProcessStampOf(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  int err = 0;
  std::optional<StatFields> f = ReadStat("/proc/" + std::to_string(pid), &err);
  if (!f) return std::nullopt;
  return ProcessStamp{pid, f->start_ticks};
}

uint64_t SelfPidNamespace() {
  std::error_code ec;
  // The link reads "pid:[4026531836]".
  std::string link = std::filesystem::read_symlink("/proc/self/ns/pid", ec).string();
  if (ec) return 0;
  std::size_t open = link.find('[');
  if (open == std::string::npos) return 0;
  try {
    return std::stoull(link.substr(open + 1));
  } catch (...) {
    return 0;
  }
}

ProcessLiveness CheckProcess(pid_t pid, std::optional<uint64_t> start_ticks) {
  if (pid <= 0) return ProcessLiveness::kUnknown;
  int err = 0;
  std::optional<StatFields> f = ReadStat("/proc/" + std::to_string(pid), &err);
  if (!f) {
    struct stat st {};
    // A missing entry means gone only when /proc is there at all.
    if ((err == ENOENT || err == ESRCH) && ::stat("/proc/self/stat", &st) == 0) {
      return ProcessLiveness::kGone;
    }
    // No usable /proc (or hidepid): the pid alone is all there is to go on.
    if (::kill(pid, 0) != 0 && errno == ESRCH) return ProcessLiveness::kGone;
    return ProcessLiveness::kUnknown;
  }
  // A zombie has released its memory and will never run again; X is "dead" (exiting).
  if (f->state == 'Z' || f->state == 'X') return ProcessLiveness::kGone;
  if (start_ticks && f->start_ticks != *start_ticks) return ProcessLiveness::kGone;
  return ProcessLiveness::kAlive;
}

bool WriteSessionOwner(const std::string& dir) {
  std::optional<ProcessStamp> self = SelfProcessStamp();
  std::ofstream out(dir + "/pid");
  if (self) {
    out << self->pid << " " << self->start_ticks << " " << SelfPidNamespace() << "\n";
  } else {
    out << ::getpid() << "\n";
  }
  return static_cast<bool>(out);
}

Reclaimed CleanStaleSessions() {
  Reclaimed total;
  const uid_t uid = ::geteuid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(TempBase(), ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("raio-session-", 0) != 0) continue;
    struct stat dir_st {};
    if (::lstat(entry.path().c_str(), &dir_st) != 0 || !S_ISDIR(dir_st.st_mode) ||
        dir_st.st_uid != uid) {
      continue;
    }
    std::ifstream pid_file(entry.path() / "pid");
    long pid = 0;
    if (!(pid_file >> pid) || pid <= 0) continue;
    std::optional<uint64_t> start_ticks;
    if (uint64_t ticks = 0; pid_file >> ticks) start_ticks = ticks;
    // A pid from another pid namespace names some other process here.
    if (uint64_t ns = 0; pid_file >> ns && ns != SelfPidNamespace()) continue;
    if (CheckProcess(static_cast<pid_t>(pid), start_ticks) != ProcessLiveness::kGone) continue;
    const uint64_t bytes = TreeAllocatedBytes(entry.path());
    RemoveTree(entry.path().string());
    RAIO_LOG_INFO("removed the session directory {} left by process {}, which is gone ({:.1f} MiB)",
                  entry.path().string(), pid, static_cast<double>(bytes) / (1 << 20));
    ++total.files;
    total.bytes += bytes;
  }
  return total;
}

std::string MakeTempDir(const std::string& prefix) {
  std::string templ = TempBase() + "/raio-" + prefix + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

void RemoveTree(const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string DescribeExit(pid_t pid, int wait_status) {
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    const char* abbrev = ::sigabbrev_np(sig);
    return absl::StrCat("pid ", pid, " was killed by signal ", sig, " (",
                        abbrev ? absl::StrCat("SIG", abbrev, ": ") : "", ::strsignal(sig), ")",
                        WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return absl::StrCat("pid ", pid, " exited with code ", WEXITSTATUS(wait_status));
}

}  // namespace raio
