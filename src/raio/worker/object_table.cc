#include "raio/worker/object_table.h"

#include <algorithm>

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

std::vector<TaskId> ObjectTable::MarkReady(Map::iterator it) {
  it->second.ready = true;
  if (callbacks_.on_ready) callbacks_.on_ready(it->first, it->second);
  return std::move(it->second.dependents);
}

std::vector<TaskId> ObjectTable::SetInStore(const ObjectId& id) {
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

std::vector<TaskId> ObjectTable::SetValue(const ObjectId& id, internal::ValueView value) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.ready) return {};
  it->second.value = std::move(value);
  return MarkReady(it);
}

std::vector<TaskId> ObjectTable::SetError(const ObjectId& id,
                                          std::shared_ptr<const proto::ErrorInfo> e) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.ready) return {};
  it->second.error = std::move(e);
  return MarkReady(it);
}

void ObjectTable::Reset(const ObjectId& id) {
  auto it = objects_.find(id);
  if (it == objects_.end()) return;
  ObjectEntry& e = it->second;
  e.ready = false;
  e.in_store = false;
  e.value = {};
  e.error = nullptr;
  e.locations.clear();
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
  if (b->second <= 0) {
    it->second.borrowers.erase(b);
    ForgetOnBehalf(it->second, borrower);
  }
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
    ForgetOnBehalf(it->second, borrower);
    MaybeFree(it);
  }
}

void ObjectTable::ForgetOnBehalf(ObjectEntry& e, const WorkerId& borrower) {
  auto first = e.on_behalf.lower_bound({borrower, ObjectId()});
  auto last = first;
  while (last != e.on_behalf.end() && last->first.first == borrower) ++last;
  e.on_behalf.erase(first, last);
}

bool ObjectTable::AddBorrowerOnBehalf(const ObjectId& id, const WorkerId& borrower,
                                      const WorkerId& self, const ObjectId& task_return,
                                      uint32_t attempt, int count) {
  auto it = objects_.find(id);
  if (it == objects_.end() || it->second.borrowed) return false;
  ObjectEntry& e = it->second;
  ObjectEntry::OnBehalf& slot = e.on_behalf[{borrower, task_return}];
  if (attempt < slot.attempt) return true;  // a late registration of a dead attempt
  int stale = 0;
  if (attempt > slot.attempt) {
    stale = slot.count;
    slot = {attempt, 0};
  }
  slot.count += count;
  bool is_self = borrower == self;
  if (is_self) {
    e.local_refs += count;
    self_on_behalf_[task_return].push_back(id);
  } else {
    e.borrowers[borrower] += count;
  }
  // The dead attempt's references go last, so the entry cannot be freed in between.
  if (stale > 0) {
    if (is_self) {
      it->second.local_refs -= stale;
      MaybeFree(it);
    } else {
      RemoveBorrower(id, borrower, stale);
    }
  }
  return true;
}

void ObjectTable::SettleOnBehalf(const ObjectId& task_return, const WorkerId& self,
                                 bool delivered) {
  auto idx = self_on_behalf_.find(task_return);
  if (idx == self_on_behalf_.end()) return;
  std::vector<ObjectId> ids = std::move(idx->second);
  self_on_behalf_.erase(idx);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (const auto& id : ids) {
    auto it = objects_.find(id);
    if (it == objects_.end()) continue;
    auto slot = it->second.on_behalf.find({self, task_return});
    if (slot == it->second.on_behalf.end()) continue;
    if (delivered) {
      it->second.on_behalf.erase(slot);
      continue;
    }
    // Keep the attempt number, so that a late registration of the dead attempt is ignored.
    int n = slot->second.count;
    slot->second = {slot->second.attempt + 1, 0};
    it->second.local_refs -= n;
    MaybeFree(it);
  }
}

void ObjectTable::MaybeFree(Map::iterator it) {
  const ObjectEntry& e = it->second;
  if (e.local_refs > 0 || e.task_arg_refs > 0 || !e.borrowers.empty()) return;
  auto node = objects_.extract(it);  // the entry itself, not a copy
  if (callbacks_.on_free) callbacks_.on_free(node.key(), node.mapped());
  for (const auto& c : node.mapped().contained) RemoveLocalRef(c);
}

}  // namespace raio::worker
