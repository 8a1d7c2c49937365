// EventLoop: one boost::asio::io_context run by one dedicated thread. A component's
// mutable state lives on its loop; other threads Post() named closures to it.
//
// Latency-critical loops (the owner's replies, a worker's pushed tasks) may busy-poll:
// after each burst of events the thread keeps polling for `spin` before it blocks in
// epoll. On virtual machines waking an idle CPU costs 40-50 us, far more than the work of
// a small task, so a short spin turns a ~100 us task round trip into ~10 us at the cost
// of up to `spin` of CPU after each burst. Those loops pass config::loop_spin_us() (0 =
// off; RAIO_LOOP_SPIN_US or system_config set it).
// A test may instead drive the io_context itself, never starting the loop
// (testkit::SteppedLoop); code that takes an EventLoop& works with either.
// Thread-safety: Post() and Stop() are thread-safe; Start() once.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

namespace raio {

class EventLoop {
 public:
  explicit EventLoop(std::string name,
                     std::chrono::microseconds spin = std::chrono::microseconds(0))
      : name_(std::move(name)), spin_(spin) {}
  ~EventLoop() { Stop(); }
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Starts the loop's thread.
  void Start();
  // Runs the loop on the calling thread until Stop() (instead of Start()).
  void RunInThisThread();
  // Stops the loop and joins its thread; pending handlers are dropped. Idempotent.
  // Must not be called from the loop's own thread.
  void Stop();

  bool started() const { return thread_.joinable(); }
  boost::asio::io_context& io() { return io_; }
  // Whether the caller runs inside this loop's io_context (its thread, or a test thread
  // stepping it: testkit::SteppedLoop).
  bool InLoopThread() const { return io_.get_executor().running_in_this_thread(); }

  template <typename F>
  void Post(F&& f) {
    boost::asio::post(io_, std::forward<F>(f));
  }

 private:
  void Loop();

  std::string name_;
  std::chrono::microseconds spin_;
  mutable boost::asio::io_context io_{1};  // mutable: get_executor() for InLoopThread
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::thread thread_;
};

}  // namespace raio
