#include "raio/worker/object_table.h"

namespace raio::worker {

void ObjectTable::Create(const ObjectId& id, int local_refs) {
  objects_[id].local_refs = local_refs;
}

ObjectEntry* ObjectTable::Find(const ObjectId& id) {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : &it->second;
}

std::vector<TaskEntry*> ObjectTable::SetValue(const ObjectId& id, internal::ObjectBuffer value) {
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
  if (it->second.local_refs <= 0 && it->second.task_arg_refs <= 0) objects_.erase(it);
}

}  // namespace raio::worker
