// TaskExecutor: the worker side of PUSH_TASK. Accepts owners' connections on the
// worker's Unix socket, queues pushed tasks in arrival order (per owner that is
// submission order) and runs them one at a time on the thread that calls Run() (the
// worker process's main thread). Each reply carries the msgpack result, or the error:
// TASK_ERROR with the exception's demangled type and message, FUNCTION_NOT_FOUND,
// SERIALIZATION.
// Threading: Listen/Stop from any thread; handlers on the loop; Run() on one thread.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "raio/common/event_loop.h"
#include "raio/rpc/listener.h"
#include "raio/task.pb.h"

namespace raio::worker {

class TaskExecutor {
 public:
  TaskExecutor(EventLoop& loop, std::string node_id_hex);
  ~TaskExecutor();

  absl::Status Listen(const std::string& socket_path);
  // The node's id, reported in errors. Call before Run().
  void set_node_id(std::string node_id_hex) { node_id_hex_ = std::move(node_id_hex); }
  // Runs tasks until Stop(); blocks.
  void Run();
  // Makes Run() return after the task in progress. Thread-safe.
  void Stop();

 private:
  struct Pending {
    std::shared_ptr<rpc::Connection> conn;
    rpc::FrameHeader header;
    proto::PushTaskRequest request;
  };
  void OnRequest(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                 std::string_view body);
  void Execute(Pending& task);

  EventLoop& loop_;
  std::string node_id_hex_;
  std::unique_ptr<rpc::Listener> listener_;
  absl::Mutex mu_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::string last_cuda_visible_devices_;
  bool cuda_set_ = false;
};

}  // namespace raio::worker
