#include "raio/worker/object_table.h"

namespace raio::worker {

void ObjectTable::Create(const ObjectId& id, int local_refs) {
  objects_[id].local_refs = local_refs;
}

bool ObjectTable::AddBorrowed(const ObjectId& id, const WorkerId& owner,
                              const std::string& address) {
  auto [it, inserted] = objects_.try_emplace(id);
  ObjectEntry& e = it->second;
  if (inserted) {
    e.borrowed = true;
    e.owner_id = owner;
    e.owner_address = address;
  }
  ++e.local_refs;
  return inserted;
}

ObjectEntry* ObjectTable::Find(const ObjectId& id) {
  auto it = objects_.find(id);
  return it == objects_.end() ? nullptr : &it->second;
}

std::vector<TaskEntry*> ObjectTable::MarkReady(Map::iterator it) {
  it->second.ready = true;
  if (callbacks_.on_ready) callbacks_.on_ready(it->first, it->second);
  return std::move(it->second.dependents);
}

std::vector<TaskEntry*> ObjectTable::SetInStore(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    ObjectEntry gone;
    gone.in_store = true;
    if (callbacks_.on_free) callbacks_.on_free(id, gone);
    return {};
  }
  if (it->second.ready) return {};
  it->second.in_store = true;
  return MarkReady(it);
}

std::vector<TaskEntry*> ObjectTable::SetValue(const ObjectId& id, internal::ValueView value) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.ready) return {};
  it->second.value = std::move(value);
  return MarkReady(it);
}

std::vector<TaskEntry*> ObjectTable::SetError(const ObjectId& id,
                                              std::shared_ptr<const proto::ErrorInfo> e) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.ready) return {};
  it->second.error = std::move(e);
  return MarkReady(it);
}

void ObjectTable::SetContained(const ObjectId& id, std::vector<ObjectId> contained) {
  auto it = objects_.find(id);
  if (it == objects_.end()) {
    for (const auto& c : contained) RemoveLocalRef(c);
    return;
  }
  auto& list = it->second.contained;
  list.insert(list.end(), contained.begin(), contained.end());
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

void ObjectTable::AddBorrower(const ObjectId& id, const WorkerId& borrower, int count) {
  auto it = objects_.find(id);
  if (it != objects_.end()) it->second.borrowers[borrower] += count;
}

void ObjectTable::RemoveBorrower(const ObjectId& id, const WorkerId& borrower, int count) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  auto b = it->second.borrowers.find(borrower);
  if (b == it->second.borrowers.end()) return;
  b->second -= count;
  if (b->second <= 0) it->second.borrowers.erase(b);
  MaybeFree(it);
}

void ObjectTable::RemoveBorrowerEverywhere(const WorkerId& borrower) {
  std::vector<ObjectId> ids;
  for (const auto& [id, e] : objects_) {
    if (e.borrowers.count(borrower)) ids.push_back(id);
  }
  for (const auto& id : ids) {
    auto it = objects_.find(id);
    if (it == objects_.end()) continue;
    it->second.borrowers.erase(borrower);
    MaybeFree(it);
  }
}

void ObjectTable::MaybeFree(Map::iterator it) {
  const ObjectEntry& e = it->second;
  if (e.local_refs > 0 || e.task_arg_refs > 0 || !e.borrowers.empty()) return;
  ObjectId id = it->first;
  ObjectEntry gone = std::move(it->second);
  objects_.erase(it);
  if (callbacks_.on_free) callbacks_.on_free(id, gone);
  for (const auto& c : gone.contained) RemoveLocalRef(c);
}

}  // namespace raio::worker
