// TaskExecutor: the worker side of PUSH_TASK and of actors. Accepts owners' connections
// on the worker's Unix socket and runs pushed tasks one at a time, in arrival order (per
// owner that is submission order), inline on its own busy-polling event loop, which Run()
// drives on the calling thread (the worker process's main thread). Tasks pushed while one
// runs wait in the socket buffer.
//
// A worker may host one actor: CREATE_ACTOR_INSTANCE (from the node) runs the factory;
// PUSH_ACTOR_TASK calls run on the instance, inline (max_concurrency 1: each caller's
// calls in order) or on a pool of max_concurrency threads (no order).
//
// Each reply carries the result, or the error: TASK_ERROR with the exception's demangled
// type and message, FUNCTION_NOT_FOUND, SERIALIZATION, OBJECT_LOST, OBJECT_STORE_FULL.
// Threading: Listen before Run; Stop from any thread; everything else on Run's thread
// (and the actor pool's threads for concurrent actors).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "raio/actor.pb.h"
#include "raio/common/event_loop.h"
#include "raio/common/running_task.h"
#include "raio/remote.h"
#include "raio/rpc/listener.h"
#include "raio/rpc/service.h"
#include "raio/serialization.h"
#include "raio/task.pb.h"
#include "raio/worker/store_client.h"

namespace raio::worker {

class CoreWorker;

class TaskExecutor {
 public:
  TaskExecutor();
  ~TaskExecutor();

  absl::Status Listen(const std::string& socket_path);
  // Also accepts tasks over TCP on `ip` (a port the system picks) for owners on other
  // hosts; returns the port.
  absl::StatusOr<int> ListenTcp(const std::string& ip);
  // The node's id, reported in errors, and its object store (arguments in the store are
  // read in place; results of 100 KiB or more are written there). Call before Run().
  void set_node_id(std::string node_id_hex) { node_id_hex_ = std::move(node_id_hex); }
  void set_store(StoreClient* store) { store_ = store; }
  // The worker's core worker: registers the task's owner as borrower of ObjectRefs that a
  // result contains.
  void set_core(CoreWorker* core) { core_ = core; }
  // Where the task being run is recorded for the node (see common/running_task.h).
  void set_running_marker(std::unique_ptr<RunningTaskMarker> marker) {
    running_ = std::move(marker);
  }
  // Handles a request the node sends on its connection (CREATE_ACTOR_INSTANCE). Thread-safe:
  // the work is posted to Run's thread.
  void OnNodeRequest(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                     std::string_view body);
  // Runs tasks until Stop(); blocks.
  void Run();
  // Makes Run() return after the task in progress. Thread-safe.
  void Stop();

 private:
  using Invoke = std::function<internal::EncodedValue(const std::vector<internal::ValueView>&)>;

  // Fills service_ and node_service_ (constructor).
  void RegisterHandlers();
  void OnRequest(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                 std::string_view body);
  // Runs one call: resolves its arguments, invokes, stores the result, replies (at once
  // when `flush_reply`, else coalesced with the batch when the call was quick).
  void Execute(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
               const proto::PushTaskRequest& request, const Invoke& invoke, bool found,
               const std::string& not_found_message, bool flush_reply = false);
  void CreateActorInstance(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                           proto::CreateActorInstanceRequest req);
  void RunActorTask(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                    const proto::PushActorTaskRequest& req);
  // Turns a pushed argument into a value view. In-store objects come from `pinned` (in
  // the order CollectStoreIds lists them), or are pinned one by one when it is null.
  absl::StatusOr<internal::ValueView> ResolveArg(const proto::TaskArg& arg,
                                                 std::deque<internal::ValueView>* pinned = nullptr);
  // The in-store objects among `args`, in argument order (lists' elements in place).
  // Pulls the in-store arguments that are on other nodes only into this node's store
  // (CoreWorker::PullAndReport). OK when there are none.
  absl::Status PullRemoteArgs(const google::protobuf::RepeatedPtrField<proto::TaskArg>& args);
  static std::vector<ObjectId> CollectStoreIds(
      const google::protobuf::RepeatedPtrField<proto::TaskArg>& args);
  // Stores a result: inline in `reply`, or in the store under the return id.
  absl::Status StoreResult(const proto::TaskSpec& spec, internal::EncodedValue result,
                           proto::PushTaskReply* reply);

  EventLoop loop_;
  std::string node_id_hex_;
  // Starts a connection from an owner (either listener).
  void Accept(const std::shared_ptr<rpc::Connection>& conn);
  std::unique_ptr<rpc::Listener> listener_;
  std::unique_ptr<rpc::Listener> tcp_listener_;
  proto::PushTaskRequest request_;  // reused for every task
  // PUSH_TASK, PUSH_ACTOR_TASK and EXIT_WORKER from owners and the node; the node's own
  // requests (CREATE_ACTOR_INSTANCE) come on the worker's connection to it.
  rpc::Service service_{"worker"};
  rpc::Service node_service_{"worker (node connection)"};
  StoreClient* store_ = nullptr;
  CoreWorker* core_ = nullptr;

  // The hosted actor, if any (set once on Run's thread before any actor call runs).
  internal::ActorInstance actor_;
  std::string actor_id_;
  std::string actor_class_;
  // Concurrent actors: a pool of threads running calls.
  struct Job {
    std::shared_ptr<rpc::Connection> conn;
    rpc::FrameHeader header;
    proto::PushActorTaskRequest request;
  };
  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::deque<Job> pool_queue_;
  bool pool_stop_ = false;
  std::vector<std::thread> pool_;
  std::unique_ptr<RunningTaskMarker> running_;
};

}  // namespace raio::worker
