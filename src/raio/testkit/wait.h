// WaitFor: polls a condition with a deadline, for tests whose code runs on other threads
// (MiniCluster, a FakeHead). Stepped tests never need it: nothing runs behind their back.
// Thread-safety: stateless.
#pragma once

#include <chrono>
#include <thread>

namespace raio::testkit {

// Polls `pred` every 5 ms until it holds or `timeout` passes; returns its last value.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace raio::testkit
