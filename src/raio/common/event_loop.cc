#include "raio/common/event_loop.h"

#include <pthread.h>

namespace raio {

void EventLoop::Start() {
  guard_.emplace(io_.get_executor());
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
    io_.run();
  });
}

void EventLoop::Stop() {
  if (!thread_.joinable()) return;
  guard_.reset();
  io_.stop();
  thread_.join();
}

}  // namespace raio
