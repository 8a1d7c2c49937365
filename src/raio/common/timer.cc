#include "raio/common/timer.h"

#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

namespace raio {

namespace internal {

boost::asio::execution_context::id ManualTimerQueue::id;

ManualTimerQueue::ManualTimerQueue(boost::asio::execution_context& context)
    : boost::asio::execution_context::service(context),
      io_(static_cast<boost::asio::io_context&>(context)) {}

uint64_t ManualTimerQueue::Add(Clock::time_point expiry, TimerHandler handler) {
  raio::MutexLock lock(&mu_);
  const uint64_t ticket = next_ticket_++;
  waits_.emplace(std::make_pair(expiry, ticket), std::move(handler));
  expiry_of_.emplace(ticket, expiry);
  return ticket;
}

bool ManualTimerQueue::Cancel(uint64_t ticket) {
  TimerHandler handler;
  {
    raio::MutexLock lock(&mu_);
    auto it = expiry_of_.find(ticket);
    if (it == expiry_of_.end()) return false;
    auto wait = waits_.find(std::make_pair(it->second, ticket));
    handler = std::move(wait->second);
    waits_.erase(wait);
    expiry_of_.erase(it);
    if (shut_down_) return true;  // `handler` is destroyed here, as asio's own would be
  }
  boost::asio::post(io_, [handler = std::move(handler)]() mutable {
    handler(boost::asio::error::operation_aborted);
  });
  return true;
}

std::size_t ManualTimerQueue::PostDue() {
  std::vector<TimerHandler> due;
  {
    raio::MutexLock lock(&mu_);
    const Clock::time_point now = Clock::now();
    while (!waits_.empty() && waits_.begin()->first.first <= now) {
      expiry_of_.erase(waits_.begin()->first.second);
      due.push_back(std::move(waits_.begin()->second));
      waits_.erase(waits_.begin());
    }
  }
  for (auto& handler : due) {
    boost::asio::post(
        io_, [handler = std::move(handler)]() mutable { handler(boost::system::error_code()); });
  }
  return due.size();
}

std::optional<Clock::time_point> ManualTimerQueue::NextExpiry() const {
  raio::MutexLock lock(&mu_);
  if (waits_.empty()) return std::nullopt;
  return waits_.begin()->first.first;
}

std::size_t ManualTimerQueue::size() const {
  raio::MutexLock lock(&mu_);
  return waits_.size();
}

void ManualTimerQueue::shutdown() {
  // The io_context is going: its handlers are destroyed without running, and so are these.
  std::map<std::pair<Clock::time_point, uint64_t>, TimerHandler> waits;
  {
    raio::MutexLock lock(&mu_);
    waits.swap(waits_);
    expiry_of_.clear();
    shut_down_ = true;
  }
}

}  // namespace internal

Timer::Timer(boost::asio::io_context& io)
    : timer_(io),
      manual_(boost::asio::has_service<internal::ManualTimerQueue>(io)
                  ? &boost::asio::use_service<internal::ManualTimerQueue>(io)
                  : nullptr) {}

Timer::~Timer() {
  if (manual_ != nullptr) CancelManual();
}

std::size_t Timer::CancelManual() {
  std::size_t cancelled = 0;
  for (uint64_t ticket : tickets_) cancelled += manual_->Cancel(ticket) ? 1 : 0;
  tickets_.clear();
  return cancelled;
}

}  // namespace raio
