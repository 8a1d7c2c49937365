#include "raio/worker/object_table.h"

namespace raio::worker {

void ObjectTable::Create(const ObjectId& id, int local_refs) {
  objects_[id].local_refs = local_refs;
}

ObjectEntry* ObjectTable::Find(const ObjectId& id) {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : &it->second;
}

std::vector<TaskEntry*> ObjectTable::SetInStore(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    on_free_in_store_(id);
    return {};
  }
  if (it->second.ready) return {};
  it->second.ready = true;
  it->second.in_store = true;
  return std::move(it->second.dependents);
}

std::vector<TaskEntry*> ObjectTable::SetValue(const ObjectId& id, internal::ValueView value) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.ready) return {};
  it->second.ready = true;
  it->second.value = std::move(value);
  return std::move(it->second.dependents);
}

std::vector<TaskEntry*> ObjectTable::SetError(const ObjectId& id,
                                              std::shared_ptr<const proto::ErrorInfo> e) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.ready) return {};
  it->second.ready = true;
  it->second.error = std::move(e);
  return std::move(it->second.dependents);
}

void ObjectTable::AddLocalRef(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it != objects_.end()) ++it->second.local_refs;
}

void ObjectTable::RemoveLocalRef(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  --it->second.local_refs;
  MaybeFree(it);
}

void ObjectTable::AddTaskArgRef(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it != objects_.end()) ++it->second.task_arg_refs;
}

void ObjectTable::RemoveTaskArgRef(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  --it->second.task_arg_refs;
  MaybeFree(it);
}

void ObjectTable::MaybeFree(std::unordered_map<ObjectId, ObjectEntry, ObjectId::Hasher>::iterator it) {
  if (it->second.local_refs <= 0 && it->second.task_arg_refs <= 0) {
    bool in_store = it->second.in_store;
    ObjectId id = it->first;
    objects_.erase(it);
    if (in_store) on_free_in_store_(id);
  }
}

}  // namespace raio::worker
