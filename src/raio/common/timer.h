// raio::Timer: the one timer type of raio's code. Use it instead of
// boost::asio::steady_timer; it has the same calls (expires_after, expires_at, expiry,
// async_wait with a handler taking a boost::system::error_code, cancel) and waits on
// raio::Clock (common/clock.h), so that the time arithmetic next to a timer (a lease's
// idle time) and the timer agree, also when a test freezes the clock.
//
// On an ordinary io_context a Timer is asio's waitable timer on raio::Clock; production
// pays one never-taken branch per call. On an io_context that has an
// internal::ManualTimerQueue (a testkit::SteppedLoop's), its waits go to that queue
// instead, and fire when the test moves the frozen clock past their expiry and steps the
// loop: a function call on the test thread, not an event from the kernel.
//
// Why not asio's timer on a test clock alone: on Linux, asio's reactor arms a kernel
// timerfd by the real monotonic clock and looks at its timer queue only when that fires
// (Boost 1.74 has no switch to turn the timerfd off). A clock moved by the test would be
// noticed later, when the kernel says, instead of within the step that moved it.
//
// Thread-safety: as boost::asio::basic_waitable_timer: one Timer is used by one thread at
// a time (its io_context's, in raio). ManualTimerQueue is thread-safe.
#pragma once

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "raio/common/clock.h"
#include "raio/common/mutex.h"

namespace raio {

namespace internal {

using TimerHandler = absl::AnyInvocable<void(const boost::system::error_code&)>;

// The waits of every raio::Timer made on one io_context after this service was added
// (boost::asio::make_service<ManualTimerQueue>(io)); testkit::SteppedLoop adds it and
// fires them. A wait's handler is posted to the io_context: with success once
// Clock::now() has reached its expiry and PostDue() runs, with operation_aborted when it
// is cancelled.
class ManualTimerQueue : public boost::asio::execution_context::service {
 public:
  using key_type = ManualTimerQueue;
  static boost::asio::execution_context::id id;

  explicit ManualTimerQueue(boost::asio::execution_context& context);

  // Queues `handler` for `expiry`; returns the wait's ticket.
  uint64_t Add(Clock::time_point expiry, TimerHandler handler);
  // Posts the wait's handler with operation_aborted; false when it already fired.
  bool Cancel(uint64_t ticket);
  // Posts the handlers of the waits due at Clock::now(), earliest first (equal expiries
  // in the order they were queued); returns how many.
  std::size_t PostDue();
  // The earliest expiry waiting, if any.
  std::optional<Clock::time_point> NextExpiry() const;
  std::size_t size() const;

 private:
  void shutdown() override;

  boost::asio::io_context& io_;
  mutable raio::Mutex mu_;
  // By (expiry, ticket): tickets grow, so equal expiries keep their queuing order.
  std::map<std::pair<Clock::time_point, uint64_t>, TimerHandler> waits_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Clock::time_point> expiry_of_ ABSL_GUARDED_BY(mu_);
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  // The io_context is being destroyed: cancelled handlers are dropped, not posted.
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace internal

class Timer {
 public:
  explicit Timer(boost::asio::io_context& io);
  // Cancels the pending waits (their handlers run with operation_aborted), as asio's.
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Sets the expiry, cancelling pending waits; returns how many were cancelled.
  std::size_t expires_after(Clock::duration d) { return expires_at(Clock::now() + d); }
  std::size_t expires_at(Clock::time_point t) {
    if (manual_ == nullptr) [[likely]] {
      return timer_.expires_at(t);
    }
    std::size_t cancelled = CancelManual();
    expiry_ = t;
    return cancelled;
  }
  Clock::time_point expiry() const { return manual_ == nullptr ? timer_.expiry() : expiry_; }
  // Runs `handler(error_code)` on the io_context's thread once the expiry is reached
  // (success) or the wait is cancelled (operation_aborted).
  template <typename Handler>
  void async_wait(Handler&& handler) {
    if (manual_ == nullptr) [[likely]] {
      timer_.async_wait(std::forward<Handler>(handler));
      return;
    }
    tickets_.push_back(
        manual_->Add(expiry_, internal::TimerHandler(std::forward<Handler>(handler))));
  }
  // Cancels the pending waits; returns how many.
  std::size_t cancel() {
    if (manual_ == nullptr) [[likely]] {
      return timer_.cancel();
    }
    return CancelManual();
  }

 private:
  std::size_t CancelManual();

  boost::asio::basic_waitable_timer<Clock> timer_;
  internal::ManualTimerQueue* const manual_;  // null: asio's timer does the waiting
  Clock::time_point expiry_;                  // manual waits
  std::vector<uint64_t> tickets_;             // manual waits since the last expires_*/cancel
};

}  // namespace raio
