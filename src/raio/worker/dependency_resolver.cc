#include "raio/worker/dependency_resolver.h"

#include "absl/strings/str_cat.h"

namespace raio::worker {

void DependencyResolver::Resolve(const TaskId& task, std::string function_name,
                                 std::vector<RefArg> ref_args, Done done) {
  Pending p;
  p.function_name = std::move(function_name);
  p.done = std::move(done);
  for (const RefArg& arg : ref_args) {
    for (const ObjectId& id : arg.ids) {
      ObjectEntry* e = objects_.Find(id);
      if (e == nullptr) continue;  // reported by Finish
      objects_.AddTaskArgRef(id);
      p.held.push_back(id);
      if (!e->ready) {
        e->dependents.push_back(task);
        ++p.unresolved;
      }
    }
  }
  p.ref_args = std::move(ref_args);
  if (p.unresolved == 0) {
    Finish(std::move(p));
    return;
  }
  pending_.emplace(task, std::move(p));
}

void DependencyResolver::OnObjectsReady(const std::vector<TaskId>& waiting) {
  for (const TaskId& task : waiting) {
    auto it = pending_.find(task);
    if (it == pending_.end()) continue;  // cancelled, or failed by another argument
    if (--it->second.unresolved > 0) continue;
    Pending p = std::move(it->second);
    pending_.erase(it);
    Finish(std::move(p));  // may re-enter (a failed call completes its own objects)
  }
}

bool DependencyResolver::Cancel(const TaskId& task) {
  auto it = pending_.find(task);
  if (it == pending_.end()) return false;
  std::vector<ObjectId> held = std::move(it->second.held);
  pending_.erase(it);
  for (const ObjectId& id : held) objects_.RemoveTaskArgRef(id);
  return true;
}

int DependencyResolver::NumUnresolved(const TaskId& task) const {
  auto it = pending_.find(task);
  return it == pending_.end() ? 0 : it->second.unresolved;
}

void DependencyResolver::Finish(Pending p) {
  ResolvedArgs out;
  // Fills `arg` from ready object `id`: its inline value, or its store id. Returns the
  // object's error, if any.
  auto fill = [&](proto::TaskArg* arg,
                  const ObjectId& id) -> std::shared_ptr<const proto::ErrorInfo> {
    ObjectEntry* e = objects_.Find(id);
    if (e == nullptr) {
      auto lost = std::make_shared<proto::ErrorInfo>();
      lost->set_type(proto::OBJECT_LOST);
      lost->set_message(absl::StrCat("argument object ", id.Hex(),
                                     " is not owned by this process or was already freed"));
      lost->set_function_name(p.function_name);
      return lost;
    }
    if (e->error) return e->error;
    if (e->in_store) {
      arg->set_object_id(id.Binary());
      arg->set_in_store(true);
      // A worker on another node pulls it from these, and tells its owner.
      if (!e->locations.empty()) {
        arg->mutable_locations()->Add(e->locations.begin(), e->locations.end());
        arg->set_owner_address(e->borrowed ? e->owner_address : owner_address_);
      }
    } else {
      arg->set_value(std::string(e->value.bytes));
      arg->set_format(static_cast<uint32_t>(e->value.format));
      arg->set_dtype(static_cast<uint32_t>(e->value.dtype));
    }
    return nullptr;
  };
  out.args.reserve(p.ref_args.size());
  for (const RefArg& ref : p.ref_args) {
    proto::TaskArg arg;
    if (ref.is_list) {
      proto::ArgList* list = arg.mutable_list();
      for (const ObjectId& id : ref.ids) {
        if ((out.error = fill(list->add_elements(), id))) break;
      }
    } else if (!ref.ids.empty()) {
      out.error = fill(&arg, ref.ids[0]);
    }
    if (out.error) break;
    out.args.emplace_back(ref.index, std::move(arg));
  }
  // Inline values were copied: their references go now. In-store arguments stay
  // referenced until the call completes, so the worker can still read them.
  for (const ObjectId& id : p.held) {
    ObjectEntry* e = objects_.Find(id);
    if (!out.error && e != nullptr && e->in_store) {
      out.kept.push_back(id);
    } else {
      objects_.RemoveTaskArgRef(id);
    }
  }
  if (out.error) out.args.clear();
  p.done(std::move(out));
}

}  // namespace raio::worker
