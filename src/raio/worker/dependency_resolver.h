// DependencyResolver: the owner-side wait for the ObjectRef arguments of tasks and actor
// calls (Ray's LocalDependencyResolver). It takes a task-arg reference on every argument
// object, waits without blocking any thread until they are all ready, then fills the
// arguments: a small object's value is copied in, a store object travels as its id (read
// in place by the worker, and kept referenced by the caller until the call completes).
//
// Pending resolutions are keyed by TaskId, and objects record the TaskIds waiting for
// them (ObjectEntry::dependents), never pointers: a call cancelled or failed while it
// waits is forgotten with Cancel, and a later readiness of its arguments finds nothing.
// Task ids are never reused (owner worker id + sequence), so no later call can be taken
// for it.
// Threading: not thread-safe; every method is called with the CoreWorker's mutex held
// (the ObjectTable it reads is guarded by it). `done` runs inside Resolve (when every
// argument is ready already) or inside OnObjectsReady, with that mutex held.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "raio/common.pb.h"
#include "raio/common/ids.h"
#include "raio/task.pb.h"
#include "raio/worker/object_table.h"

namespace raio::worker {

// One argument that is an ObjectRef, or a std::vector of them, before resolution.
struct RefArg {
  int index = 0;              // position among the call's arguments
  std::vector<ObjectId> ids;  // one id, or the list's elements in order
  bool is_list = false;
};

// What a resolution produced.
struct ResolvedArgs {
  // Set when an argument object holds an error (the call fails with it) or is unknown.
  std::shared_ptr<const proto::ErrorInfo> error;
  // The filled arguments, by index into the call's arguments (empty on error).
  std::vector<std::pair<int, proto::TaskArg>> args;
  // In-store argument objects: each still holds one task-arg reference, which the caller
  // drops (ObjectTable::RemoveTaskArgRef) when the call completes.
  std::vector<ObjectId> kept;
};

class DependencyResolver {
 public:
  using Done = std::function<void(ResolvedArgs)>;

  explicit DependencyResolver(ObjectTable& objects) : objects_(objects) {}
  // This process's owner address (ObjectRef encoding), put beside in-store arguments it
  // owns so that a worker that pulls one can say so.
  void set_owner_address(std::string encoded) { owner_address_ = std::move(encoded); }

  // Resolves `ref_args` of call `task` (named `function_name` in errors) and calls `done`
  // exactly once, unless Cancel comes first. `task` must not be pending already.
  void Resolve(const TaskId& task, std::string function_name, std::vector<RefArg> ref_args,
               Done done);
  // Objects became ready; `waiting` are the ids their entries recorded (duplicates count
  // once per occurrence, as they were registered). Unknown ids are skipped.
  void OnObjectsReady(const std::vector<TaskId>& waiting);
  // Forgets `task` and drops its references; its `done` is never called. Returns whether
  // it was pending.
  bool Cancel(const TaskId& task);
  // How many argument objects `task` still waits for (0 when it is not pending).
  int NumUnresolved(const TaskId& task) const;
  std::size_t size() const { return pending_.size(); }

 private:
  struct Pending {
    std::string function_name;
    std::vector<RefArg> ref_args;
    std::vector<ObjectId> held;  // task-arg references taken, one per argument object
    int unresolved = 0;
    Done done;
  };
  // Fills the arguments of a call whose objects are all ready, and calls its `done`.
  void Finish(Pending pending);

  std::string owner_address_;

  ObjectTable& objects_;
  std::unordered_map<TaskId, Pending, TaskId::Hasher> pending_;
};

}  // namespace raio::worker
