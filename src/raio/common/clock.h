// raio::Clock: the clock of every timer in raio (raio::Timer, common/timer.h) and of the
// time arithmetic next to them (a lease's idle time). In production it is
// std::chrono::steady_clock: now() is one relaxed atomic load (a plain load on x86) and a
// never-taken branch, then steady_clock::now(), which is clock_gettime(CLOCK_MONOTONIC)
// through the vDSO.
//
// A test may freeze it (testkit::SteppedLoop does): from then on now() returns the frozen
// time, which moves only when the test calls Advance(), so a timer fires exactly when the
// test has moved time past its expiry and runs the loop, never by itself. Freezing, not an
// offset added to the real clock, is what makes such a test deterministic: under an
// offset, real time still passes, and a slow machine (TSan) fires a timeout that the test
// did not advance to.
//
// Timers (raio::Timer) wait on this clock; on a stepped loop they fire by it alone.
//
// Thread-safety: now() from any thread. Freeze/Advance/Unfreeze are for tests, from one
// thread; other threads see the change at their next now() (relaxed: nothing else is
// published through it).
#pragma once

#include <atomic>
#include <chrono>
#include <limits>

namespace raio {

class Clock {
 public:
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<Clock, duration>;
  static constexpr bool is_steady = true;

  static time_point now() noexcept {
    const rep frozen = frozen_at_.load(std::memory_order_relaxed);
    if (frozen != kRunning) [[unlikely]] {
      return time_point(duration(frozen));
    }
    return time_point(std::chrono::steady_clock::now().time_since_epoch());
  }

  // Tests only. Freezes the clock at the current real time (a no-op when frozen).
  static void Freeze() noexcept;
  // Tests only. Moves a frozen clock forward by `d` (>= 0); no-op when running.
  static void Advance(duration d) noexcept;
  // Tests only. Lets the clock run again. It steps back to the real time (by what was
  // advanced): only call it once no timer armed while frozen matters any more.
  static void Unfreeze() noexcept;
  static bool frozen() noexcept { return frozen_at_.load(std::memory_order_relaxed) != kRunning; }

 private:
  static constexpr rep kRunning = std::numeric_limits<rep>::min();
  static std::atomic<rep> frozen_at_;
};

}  // namespace raio
