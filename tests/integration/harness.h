// Helpers shared by the integration tests: running a shell command and polling for a
// condition. Linked into every test through raio_test_functions.
#pragma once

#include <chrono>
#include <functional>
#include <string>

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

}  // namespace raio_test
