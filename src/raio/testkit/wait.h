// WaitFor: polls a condition with a deadline, for tests whose code runs on other threads
// (MiniCluster, a FakeHead). Stepped tests never need it: nothing runs behind their back.
// Thread-safety: stateless.
#pragma once

#include <chrono>
#include <thread>

#include "raio/testkit/time_scale.h"

namespace raio::testkit {

// Polls `pred` every 5 ms until it holds or `timeout` times TimeScale() passes; returns its
// last value. The timeout is scaled here (time_scale.h), so that every caller's bound holds
// in sanitizer and Debug builds too: callers pass the bound an optimised build needs and
// do not scale it again.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + Scaled(timeout);
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace raio::testkit
