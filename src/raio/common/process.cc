#include "raio/common/process.h"

#include <cxxabi.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

namespace raio {

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

void CleanStaleSessions() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(TempBase(), ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("raio-session-", 0) != 0) continue;
    std::ifstream pid_file(entry.path() / "pid");
    long pid = 0;
    if (!(pid_file >> pid) || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // alive
    std::ifstream store_file(entry.path() / "store");
    std::string shm;
    if (std::getline(store_file, shm) && shm.rfind("/dev/shm/raio-store-", 0) == 0) {
      ::unlink(shm.c_str());
    }
    RemoveTree(entry.path().string());
  }
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

}  // namespace raio
