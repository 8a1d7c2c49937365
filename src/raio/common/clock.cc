#include "raio/common/clock.h"

namespace raio {

std::atomic<Clock::rep> Clock::frozen_at_{Clock::kRunning};

void Clock::Freeze() noexcept {
  rep expected = kRunning;
  frozen_at_.compare_exchange_strong(expected,
                                     std::chrono::steady_clock::now().time_since_epoch().count(),
                                     std::memory_order_relaxed);
}

void Clock::Advance(duration d) noexcept {
  if (d.count() <= 0) return;
  rep current = frozen_at_.load(std::memory_order_relaxed);
  while (current != kRunning && !frozen_at_.compare_exchange_weak(current, current + d.count(),
                                                                  std::memory_order_relaxed)) {
  }
}

void Clock::Unfreeze() noexcept { frozen_at_.store(kRunning, std::memory_order_relaxed); }

}  // namespace raio
