#include "raio/common/event_loop.h"

#include <pthread.h>
#include <sched.h>

namespace raio {

void EventLoop::Start() {
  guard_.emplace(io_.get_executor());
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
    Loop();
  });
}

void EventLoop::RunInThisThread() {
  guard_.emplace(io_.get_executor());
  Loop();
}

void EventLoop::Loop() {
  if (spin_.count() == 0) {
    io_.run();
    return;
  }
  using Clock = std::chrono::steady_clock;
  auto last_activity = Clock::now();
  while (!io_.stopped()) {
    if (io_.poll() > 0) {
      last_activity = Clock::now();
      continue;
    }
    if (Clock::now() - last_activity < spin_) {
      sched_yield();  // let a runnable thread on this CPU go first
      continue;
    }
    io_.run_one();  // blocks in epoll until the next event
    last_activity = Clock::now();
  }
}

void EventLoop::Stop() {
  guard_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace raio
