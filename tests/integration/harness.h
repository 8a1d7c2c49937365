// Helpers shared by the integration tests: running a shell command, polling for a
// condition, and looking for shared memory a process left behind. Linked into every test through
// raio_test_functions.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace raio_test {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally
  std::string output;  // its standard output, with standard error when merged
};

// Runs `command` with /bin/sh and waits for it. Standard error is merged into the output
// when `merge_stderr`, else discarded.
CommandResult RunCommand(const std::string& command, bool merge_stderr = true);

// Polls `pred` every 20 ms until it holds or `timeout` passes; returns its last value.
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

// The names of the entries in /dev/shm now.
std::set<std::string> DevShmEntries();
// The raio entries in /dev/shm that are not in `before`, except the raio-store-<pid>-...
// files of processes other than `pid` (older raio builds that other checkouts on this
// machine may be running meanwhile). Empty when `pid` left nothing there.
std::vector<std::string> NewRaioShmEntries(const std::set<std::string>& before, pid_t pid);
// Whether process `pid` holds a node's object store: an open memory file named
// raio-object-store (the store has no name in /dev/shm).
bool HoldsObjectStore(pid_t pid);

}  // namespace raio_test
