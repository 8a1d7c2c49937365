// TaskExecutor: the worker side of PUSH_TASK. Accepts owners' connections on the
// worker's Unix socket and runs pushed tasks one at a time, in arrival order (per owner
// that is submission order), inline on its own busy-polling event loop, which Run()
// drives on the calling thread (the worker process's main thread). Tasks pushed while
// one runs wait in the socket buffer. Each reply carries the msgpack result, or the error:
// TASK_ERROR with the exception's demangled type and message, FUNCTION_NOT_FOUND,
// SERIALIZATION.
// Threading: Listen before Run; Stop from any thread; everything else on Run's thread.
#pragma once

#include <memory>
#include <vector>
#include <string>

#include "absl/synchronization/mutex.h"
#include "raio/common/event_loop.h"
#include "raio/rpc/listener.h"
#include "raio/serialization.h"
#include "raio/task.pb.h"
#include "raio/worker/store_client.h"

namespace raio::worker {

class TaskExecutor {
 public:
  TaskExecutor();
  ~TaskExecutor();

  absl::Status Listen(const std::string& socket_path);
  // The node's id, reported in errors, and its object store (arguments in the store are
  // read in place; results of 100 KiB or more are written there). Call before Run().
  void set_node_id(std::string node_id_hex) { node_id_hex_ = std::move(node_id_hex); }
  void set_store(StoreClient* store) { store_ = store; }
  // The worker's core worker: registers the task's owner as borrower of ObjectRefs that a
  // result contains.
  void set_core(class CoreWorker* core) { core_ = core; }
  // Runs tasks until Stop(); blocks.
  void Run();
  // Makes Run() return after the task in progress. Thread-safe.
  void Stop();

 private:
  void OnRequest(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                 std::string_view body);
  void Execute(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h);
  // Turns a pushed argument into a value view (pinning in-store objects).
  absl::StatusOr<internal::ValueView> ResolveArg(const proto::TaskArg& arg);
  // Stores a result: inline in `reply`, or in the store under the return id.
  absl::Status StoreResult(internal::EncodedValue result, proto::PushTaskReply* reply);

  EventLoop loop_;
  std::string node_id_hex_;
  std::unique_ptr<rpc::Listener> listener_;
  proto::PushTaskRequest request_;  // reused for every task
  StoreClient* store_ = nullptr;
  class CoreWorker* core_ = nullptr;
  std::vector<std::string> device_mask_;  // CUDA_VISIBLE_DEVICES the worker started with
  std::string last_cuda_visible_devices_;
  bool cuda_set_ = false;
};

}  // namespace raio::worker
