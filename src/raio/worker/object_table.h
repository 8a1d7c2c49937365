// ObjectTable: the objects an owner (driver or worker) owns: their values or errors once
// ready, the tasks waiting for them as arguments, and their reference counts (copies of
// ObjectRef in this process, plus pending tasks that take them as arguments). An
// object is freed when both counts reach zero.
// Threading: not thread-safe; CoreWorker guards it with its mutex.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "raio/common.pb.h"
#include "raio/common/ids.h"
#include "raio/internal/runtime.h"

namespace raio::worker {

struct TaskEntry;

struct ObjectEntry {
  bool ready = false;
  internal::ValueView value;               // ready with an inline value
  bool in_store = false;                   // ready, value in the node's object store
  std::shared_ptr<const proto::ErrorInfo> error;  // ready with an error
  int local_refs = 0;
  int task_arg_refs = 0;
  std::vector<TaskEntry*> dependents;      // tasks waiting for this object
};

class ObjectTable {
 public:
  // `on_free_in_store` runs when an object whose value is in the store is freed.
  explicit ObjectTable(std::function<void(const ObjectId&)> on_free_in_store)
      : on_free_in_store_(std::move(on_free_in_store)) {}
  // Adds a not-yet-ready object with `local_refs` references.
  void Create(const ObjectId& id, int local_refs);
  ObjectEntry* Find(const ObjectId& id);
  // Marks ready with a value / an error. Returns the tasks that waited for it; empty if
  // the object was already freed (the result is then dropped).
  std::vector<TaskEntry*> SetValue(const ObjectId& id, internal::ValueView value);
  // Marks ready with its value in the store. If the object was already freed, runs
  // on_free_in_store for it right away.
  std::vector<TaskEntry*> SetInStore(const ObjectId& id);
  std::vector<TaskEntry*> SetError(const ObjectId& id, std::shared_ptr<const proto::ErrorInfo> e);
  void AddLocalRef(const ObjectId& id);
  void RemoveLocalRef(const ObjectId& id);
  void AddTaskArgRef(const ObjectId& id);
  void RemoveTaskArgRef(const ObjectId& id);
  std::size_t size() const { return objects_.size(); }

 private:
  void MaybeFree(std::unordered_map<ObjectId, ObjectEntry, ObjectId::Hasher>::iterator it);
  std::function<void(const ObjectId&)> on_free_in_store_;
  std::unordered_map<ObjectId, ObjectEntry, ObjectId::Hasher> objects_;
};

}  // namespace raio::worker
