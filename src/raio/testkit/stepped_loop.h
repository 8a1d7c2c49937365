// SteppedLoop: an event loop that the test thread drives, with no thread of its own, on a
// frozen clock (CAF's deterministic test fixture is the model). Code under test takes
// loop() where it takes an EventLoop&; its sockets, posted closures and timers all live on
// io(); nothing runs until the test calls RunUntilIdle() or AdvanceTime(), and then only
// on the test thread, so every interleaving a test sets up is the one that happens.
//
// While a SteppedLoop lives, raio::Clock is frozen (common/clock.h), and every raio::Timer
// made on io() waits in the loop's internal::ManualTimerQueue (common/timer.h), not in
// asio's reactor: a timer fires only when AdvanceTime() has moved the clock to its expiry,
// within that call. Socket I/O stays real: bytes that
// one end writes are readable at the other at once when both ends are Unix sockets
// (socketpairs, or Unix listeners in a temp dir), which is what the fakes (fake_peer.h)
// use; over TCP the kernel may deliver later, so stepped tests keep to Unix sockets.
//
// Thread-safety: one thread (the test's) constructs, steps and destroys it. Several may
// live at once (their clock is the one process-wide raio::Clock).
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstddef>

#include "raio/common/clock.h"
#include "raio/common/event_loop.h"
#include "raio/common/timer.h"

namespace raio::testkit {

class SteppedLoop {
 public:
  // Freezes raio::Clock (the first live SteppedLoop does).
  SteppedLoop();
  // Drops the handlers not run; unfreezes the clock when it is the last one live. Destroy
  // what uses io() (connections, timers) first, after a last RunUntilIdle().
  ~SteppedLoop();
  SteppedLoop(const SteppedLoop&) = delete;
  SteppedLoop& operator=(const SteppedLoop&) = delete;

  // What components under test take (never started: InLoopThread() is true inside
  // RunUntilIdle, false on the test thread outside it, as on a user thread).
  EventLoop& loop() { return loop_; }
  boost::asio::io_context& io() { return loop_.io(); }

  // Runs every handler that is ready, and those they make ready, until none is: posted
  // closures, completed socket reads and writes, timers due at the current (frozen) time.
  // Returns how many handlers ran. Never blocks.
  std::size_t RunUntilIdle();
  // Moves the clock forward by `d` in steps: to each timer expiry within `d` in turn,
  // running what is due there (RunUntilIdle), then to now + `d`. So timers fire in expiry
  // order, each seeing the clock at its own expiry, and one armed by a handler on the way
  // fires too if it falls within `d` (a repeating timer fires once per period).
  std::size_t AdvanceTime(Clock::duration d);
  // Timer waits not yet fired.
  std::size_t num_timers() const { return timers_.size(); }
  // The frozen time.
  static Clock::time_point Now() { return Clock::now(); }

 private:
  EventLoop loop_{"stepped"};
  internal::ManualTimerQueue& timers_;
  // poll() would stop the io_context for good once it has no work (an idle fixture).
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
};

}  // namespace raio::testkit
