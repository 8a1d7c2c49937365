// Helpers shared by the integration tests: running a shell command, polling for a
// condition, and looking for shared memory a process left behind. Linked into every test through
// raio_test_functions.
//
// Every command a test starts here dies with the test, even outside tests/sandbox.sh: it
// runs under a guard process that leads its own process group and that the kernel signals
// when the test dies (PR_SET_PDEATHSIG); the guard then SIGKILLs its group. Daemons that
// leave the group (`raio start` calls setsid) are the sandbox's and the raio_clean_leftovers
// fixture's to end. Thread-safety: all functions may be called from any thread, but a
// background command (SpawnCommand) is tied to the thread that started it (the kernel sends
// the death signal when that thread ends), so start them from the test's main thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace raio_test {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally (or timed out)
  std::string output;  // its standard output, with standard error when merged
};

// How long RunCommand waits unless told otherwise, before the test time scale.
inline constexpr std::chrono::milliseconds kDefaultCommandTimeout = std::chrono::seconds(60);

// Runs `command` with /bin/sh and waits for it, at most `timeout` times the test time scale
// (raio::testkit::Scaled). Standard error is merged into the output when `merge_stderr`, else
// discarded. Past the deadline the command's process group is SIGKILLed, exit_code is -1 and
// the output ends with a line saying "timed out after N ms". Blocks until the command has
// exited and its output is closed, or the deadline passes.
CommandResult RunCommand(const std::string& command, bool merge_stderr = true,
                         std::chrono::milliseconds timeout = kDefaultCommandTimeout);

// Starts `command` with /bin/sh in the background (its own redirections apply; standard
// input, output and error are otherwise the test's) and returns at once: the pid of its guard
// (`kill(-pid, SIGKILL)` ends it all), or -1 when it could not be started. Nobody waits for
// it; it is reaped by a later SpawnCommand or when the test exits, and killed if the test
// dies first.
pid_t SpawnCommand(const std::string& command);

// For a child just forked from process `parent` (call it first thing after fork, before
// exec): makes the child the guard described above, leading a new process group, and returns
// in a grandchild that should exec the command (or _exit). The guard never returns: it waits
// for the grandchild and exits as it did (the same exit code, or the same signal). It exits
// at once when `parent` has already gone. Only async-signal-safe calls, so callable in the
// child of a multi-threaded process. Used by test_hosts.cc for commands on test hosts.
void BecomeGuardedChild(pid_t parent);

// Polls `pred` every 20 ms until it holds or Scaled(`timeout`) passes (the test time scale,
// raio/testkit/time_scale.h: callers pass the bound of an optimised build); returns its last
// value.
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
// Whether process `pid` has ended: no /proc/<pid>/stat (reaped), a zombie its parent has
// yet to reap, or one that vanishes while being read (the read fails with ESRCH; an
// ifstream would throw there). Never throws.
bool ProcessGone(pid_t pid);

}  // namespace raio_test
