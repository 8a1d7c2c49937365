#include "harness.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <thread>

namespace raio_test {

CommandResult RunCommand(const std::string& command, bool merge_stderr) {
  CommandResult r;
  FILE* p = ::popen((command + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
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

}  // namespace raio_test
