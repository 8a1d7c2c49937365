#include "raio/testkit/stepped_loop.h"

#include <optional>

namespace raio::testkit {

namespace {
// Live SteppedLoops; the clock is frozen while there is one. Test thread only.
int live_loops = 0;
}  // namespace

SteppedLoop::SteppedLoop()
    : timers_(boost::asio::make_service<internal::ManualTimerQueue>(loop_.io())),
      work_(loop_.io().get_executor()) {
  if (live_loops++ == 0) Clock::Freeze();
}

SteppedLoop::~SteppedLoop() {
  work_.reset();
  loop_.Stop();
  if (--live_loops == 0) Clock::Unfreeze();
}

std::size_t SteppedLoop::RunUntilIdle() {
  std::size_t total = 0;
  for (;;) {
    if (io().stopped()) io().restart();
    const std::size_t fired = timers_.PostDue();
    // poll() returns once the reactor found nothing more (epoll_wait with a zero timeout)
    // and no handler is queued.
    const std::size_t ran = io().poll();
    total += ran;
    if (fired == 0 && ran == 0) return total;
  }
}

std::size_t SteppedLoop::AdvanceTime(Clock::duration d) {
  const Clock::time_point target = Clock::now() + d;
  std::size_t total = RunUntilIdle();
  for (std::optional<Clock::time_point> next = timers_.NextExpiry(); next && *next <= target;
       next = timers_.NextExpiry()) {
    if (*next > Clock::now()) Clock::Advance(*next - Clock::now());
    total += RunUntilIdle();
  }
  if (target > Clock::now()) Clock::Advance(target - Clock::now());
  return total + RunUntilIdle();
}

}  // namespace raio::testkit
