// EventLoop: one boost::asio::io_context run by one dedicated thread. A component's
// mutable state lives on its loop; other threads Post() named closures to it.
// Thread-safety: Post() and Stop() are thread-safe; Start() once.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <optional>
#include <string>
#include <thread>

namespace raio {

class EventLoop {
 public:
  explicit EventLoop(std::string name) : name_(std::move(name)) {}
  ~EventLoop() { Stop(); }
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Starts the loop's thread.
  void Start();
  // Stops the loop and joins its thread; pending handlers are dropped. Idempotent.
  // Must not be called from the loop's own thread.
  void Stop();

  bool started() const { return thread_.joinable(); }
  boost::asio::io_context& io() { return io_; }
  bool InLoopThread() const { return std::this_thread::get_id() == thread_.get_id(); }

  template <typename F>
  void Post(F&& f) {
    boost::asio::post(io_, std::forward<F>(f));
  }

 private:
  std::string name_;
  boost::asio::io_context io_{1};
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::thread thread_;
};

}  // namespace raio
