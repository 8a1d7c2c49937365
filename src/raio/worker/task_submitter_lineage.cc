// TaskSubmitter's lineage: the specs of finished tasks whose results are in the object
// store, kept while those results are referenced, and the re-runs that make a result
// again when every copy of it was lost with a node (lineage reconstruction). See
// task_submitter.h (struct Lineage) and docs/design/fault_tolerance.md.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/internal/returns.h"
#include "raio/worker/task_submitter.h"

namespace raio::worker {
namespace {

// Re-runs of one task for arguments that could not be read, before it fails.
constexpr int kMaxArgRecoveries = 3;

bool IsPutId(const ObjectId& id) {
  uint32_t index = 0;
  std::memcpy(&index, id.data() + TaskId::kSize, sizeof(index));
  return index >= 0x80000000u;
}

bool HasStoreElements(const proto::TaskArg& arg) {
  if (arg.kind_case() != proto::TaskArg::kList) return false;
  for (const auto& e : arg.list().elements()) {
    if (e.in_store()) return true;
  }
  return false;
}

std::string EvictedWhy() {
  return absl::StrCat("its lineage was evicted (an owner keeps at most max_lineage_bytes = ",
                      config::max_lineage_bytes(), " bytes of task specs, the newest)");
}

}  // namespace

std::chrono::milliseconds NodeDeathBound() {
  const auto period = config::health_check_period_ms();
  const double ms =
      static_cast<double>(std::max(period, config::health_check_timeout_ms()).count()) *
          config::health_check_failure_threshold() +
      static_cast<double>(period.count());
  // In double milliseconds (a huge configuration would overflow), capped at a day.
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(ms, 86'400'000.0)));
}

std::shared_ptr<Lineage> TaskSubmitter::MakeLineage(const TaskEntry& t,
                                                    const proto::PushTaskReply& reply) {
  if (reply.has_error()) return nullptr;
  // Only results in the store can be lost with a node; inline values live in this process.
  bool in_store = t.num_returns <= 1 && reply.in_store();
  bool contained = reply.contained_size() > 0;
  for (const auto& r : reply.returns()) {
    in_store = in_store || r.in_store();
    contained = contained || r.contained_size() > 0;
  }
  if (!in_store) return nullptr;
  const auto& args = t.request.spec().args();
  std::optional<NoLineage> gap;
  if (t.retries_left == 0) gap = NoLineage::kNoRetries;
  if (contained || !t.held_refs.empty()) gap = NoLineage::kContainsRefs;
  if (std::any_of(args.begin(), args.end(), HasStoreElements)) gap = NoLineage::kListArgument;
  if (gap) {
    for (int i = 0; i < t.num_returns; ++i) {
      if (ObjectEntry* e = objects_.Find(internal::NthReturnId(t.return_id, i))) {
        e->no_lineage = *gap;
      }
    }
    return nullptr;
  }
  auto lineage = std::make_shared<Lineage>();
  for (int i = 0; i < args.size(); ++i) {
    if (!args[i].in_store() || args[i].kind_case() != proto::TaskArg::kObjectId) continue;
    ObjectId arg = ObjectId::FromBinary(args[i].object_id());
    lineage->store_args.emplace_back(i, arg);
    ObjectEntry* e = objects_.Find(arg);
    lineage->arg_lineage.push_back(e != nullptr && !e->borrowed ? e->lineage : nullptr);
  }
  lineage->request = t.request;
  lineage->demand = t.cls->demand;
  lineage->return_id = t.return_id;
  lineage->num_returns = t.num_returns;
  lineage->runs_left = t.retries_left;
  lineage->attempt = t.attempt;
  lineage->bytes = sizeof(Lineage) + lineage->request.ByteSizeLong();
  lineage->total = lineage_bytes_;
  *lineage_bytes_ += lineage->bytes;
  lineage_order_.push_back(lineage);
  return lineage;
}

void TaskSubmitter::AttachLineage(const std::shared_ptr<Lineage>& lineage) {
  for (int i = 0; i < lineage->num_returns; ++i) {
    ObjectEntry* e = objects_.Find(internal::NthReturnId(lineage->return_id, i));
    if (e != nullptr && e->in_store && !e->borrowed) e->lineage = lineage;
  }
  EvictLineage();
}

void TaskSubmitter::EvictLineage() {
  const std::size_t cap = config::max_lineage_bytes();
  while (*lineage_bytes_ > cap && !lineage_order_.empty()) {
    std::shared_ptr<Lineage> oldest = lineage_order_.front().lock();
    lineage_order_.pop_front();
    if (!oldest || oldest->evicted) continue;
    *lineage_bytes_ -= oldest->bytes;
    oldest->evicted = true;
    oldest->request.Clear();
    oldest->store_args.clear();
    oldest->arg_lineage.clear();
  }
  // Freed lineage leaves expired entries behind: drop them now and then, so that the
  // queue follows what is kept.
  while (!lineage_order_.empty() && lineage_order_.front().expired()) lineage_order_.pop_front();
  if (lineage_order_.size() >= lineage_compact_at_) {
    std::erase_if(lineage_order_, [](const std::weak_ptr<Lineage>& l) { return l.expired(); });
    lineage_compact_at_ = std::max<std::size_t>(4096, 2 * lineage_order_.size());
  }
}

std::string TaskSubmitter::DescribeLineage(const ObjectId& id) {
  ObjectEntry* e = objects_.Find(id);
  if (e == nullptr) return "unknown object";
  if (e->borrowed) return "borrowed: its owner keeps its lineage";
  if (e->lineage) {
    if (e->lineage->evicted) return EvictedWhy();
    if (e->lineage->runs_left == 0) {
      return absl::StrCat("its task ", e->lineage->request.spec().function_name(),
                          " has used up its retries (max_retries)");
    }
    return "";
  }
  switch (e->no_lineage) {
    case NoLineage::kNoRetries:
      return "its task had no retries left (max_retries): it is not run again";
    case NoLineage::kContainsRefs:
      return "its task's value or arguments hold ObjectRefs, whose borrows a re-run would "
             "not restore";
    case NoLineage::kListArgument:
      return "its task took a std::vector of ObjectRefs held in the store, which is not "
             "re-run";
    case NoLineage::kNotATask:
      break;
  }
  if (IsPutId(id))
    return "it was put by this process (raio::Put): only task results are made again";
  return "it is the result of an actor call, which is not re-run";
}

void TaskSubmitter::RecoverObjectsOn(const std::string& node_id_hex, const std::string& why) {
  std::vector<ObjectId> lost;
  std::vector<ObjectId> borrowed;
  objects_.ForEach([&](const ObjectId& id, ObjectEntry& e) {
    if (!e.ready || !e.in_store || e.locations.empty()) return;
    auto dead = std::remove_if(e.locations.begin(), e.locations.end(), [&](const auto& a) {
      return NodeId::FromBinary(a.node_id()).Hex() == node_id_hex;
    });
    if (dead == e.locations.end()) return;
    e.locations.erase(dead, e.locations.end());
    if (!e.locations.empty()) return;  // another node holds a copy
    (e.borrowed ? borrowed : lost).push_back(id);
  });
  // A borrowed object is asked of its owner again (which makes it again, or says it is
  // lost) by the next Get.
  for (const ObjectId& id : borrowed) {
    objects_.Reset(id);
    if (ObjectEntry* e = objects_.Find(id)) e->fetch_requested = false;
  }
  // All lost objects are pending before any is made again: a re-run whose argument is
  // lost too then waits for that argument's re-run instead of reading a dead copy.
  for (const ObjectId& id : lost) objects_.Reset(id);
  const std::string cause =
      absl::StrCat("its only copies were on node ", node_id_hex, ", which died (", why, ")");
  for (const ObjectId& id : lost) Reconstruct(id, cause);
  if (!lost.empty()) {
    RAIO_LOG_INFO(
        "node {} died holding the only copies of {} objects owned here; {} of them "
        "are being made again from their lineage",
        node_id_hex, lost.size(), std::count_if(lost.begin(), lost.end(), [&](const ObjectId& id) {
          ObjectEntry* e = objects_.Find(id);
          return e != nullptr && !e->ready;
        }));
  }
  // Tasks that could not read an argument waited for this: their arguments are being made
  // again (or have failed), so they resolve now.
  std::vector<TaskId> waiting;
  for (const auto& [id, t] : tasks_) {
    if (t->awaiting_recovery) waiting.push_back(id);
  }
  for (const TaskId& id : waiting) {
    if (TaskEntry* t = FindTask(id)) ResolveAgain(t);
  }
  if (!lost.empty() || !borrowed.empty()) ready_cv_.SignalAll();
}

void TaskSubmitter::Reconstruct(const ObjectId& id, const std::string& why) {
  ObjectEntry* e = objects_.Find(id);
  if (e == nullptr || e->borrowed) return;
  std::shared_ptr<Lineage> lineage = e->lineage;
  if (lineage && lineage->rebuilding) return;  // another return of its task asked first
  std::string why_not;
  if (lineage && Rerun(lineage, why, &why_not)) return;
  if (!lineage) why_not = DescribeLineage(id);
  objects_.Reset(id);
  FinishObject(id, {}, false,
               MakeError(proto::OBJECT_LOST, absl::StrCat("object ", id.Hex(), " is lost: ", why,
                                                          "; it cannot be made again: ", why_not)));
}

bool TaskSubmitter::Rerun(const std::shared_ptr<Lineage>& lineage, const std::string& why,
                          std::string* why_not) {
  if (lineage->evicted) {
    *why_not = EvictedWhy();
    return false;
  }
  const std::string& fn = lineage->request.spec().function_name();
  if (lineage->runs_left == 0) {
    *why_not = absl::StrCat("its task ", fn, " has used up its retries (max_retries)");
    return false;
  }
  std::vector<RefArg> ref_args;
  for (std::size_t k = 0; k < lineage->store_args.size(); ++k) {
    const auto& [index, arg] = lineage->store_args[k];
    ref_args.push_back(RefArg{index, {arg}, false});
    if (objects_.Find(arg) != nullptr) continue;  // alive, or pending again (lost too)
    // Freed since the task ran: made again first, if its own lineage is kept. Its entry
    // is referenced by the re-run's argument resolution (and freed after it).
    const std::shared_ptr<Lineage>& from = lineage->arg_lineage[k];
    objects_.Create(arg, 0);
    ObjectEntry* a = objects_.Find(arg);
    a->lineage = from;
    std::string arg_why_not = "it has no lineage";
    if (from && !from->rebuilding && Rerun(from, why, &arg_why_not)) continue;
    FinishObject(arg, {}, false,
                 MakeError(proto::OBJECT_LOST,
                           absl::StrCat("argument object ", arg.Hex(), " of ", fn,
                                        " was freed and cannot be made again: ", arg_why_not)));
  }
  lineage->rebuilding = true;
  if (lineage->runs_left > 0) --lineage->runs_left;
  for (int i = 0; i < lineage->num_returns; ++i) {
    objects_.Reset(internal::NthReturnId(lineage->return_id, i));
  }
  auto task = std::make_shared<TaskEntry>();
  task->task_id = TaskIdOf(lineage->return_id);
  task->request = lineage->request;
  task->attempt = ++lineage->attempt;
  task->return_id = lineage->return_id;
  task->num_returns = lineage->num_returns;
  task->retries_left = lineage->runs_left;
  task->rebuilds = lineage;
  RAIO_LOG_INFO("running {} (task {}) again to make its lost result: {}", fn, task->task_id.Hex(),
                why);
  Submit(std::move(task), lineage->demand, std::move(ref_args));
  return true;
}

bool TaskSubmitter::RecoverArguments(TaskEntry* t) {
  if (t->arg_recoveries >= kMaxArgRecoveries || t->arg_refs.empty()) return false;
  const auto& args = t->request.spec().args();
  if (std::any_of(args.begin(), args.end(), HasStoreElements)) return false;
  ++t->arg_recoveries;
  // An argument already known lost is being made again (or has failed): resolve now.
  for (const ObjectId& id : t->arg_refs) {
    ObjectEntry* e = objects_.Find(id);
    if (e == nullptr || !e->ready || e->error) {
      ResolveAgain(t);
      return true;
    }
  }
  // Else the node that held it has not been declared dead yet: wait for that
  // (RecoverObjectsOn ends the wait), at most as long as the head takes to declare it.
  t->awaiting_recovery = true;
  if (!t->recovery_timer) t->recovery_timer = std::make_unique<Timer>(loop_.io());
  t->recovery_timer->expires_after(NodeDeathBound());
  const TaskId id = t->task_id;
  t->recovery_timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (ec) return;
    OutboxLock lock(&mu_, &outbox_);
    if (shut_down_) return;
    TaskEntry* task = FindTask(id);
    if (task != nullptr && task->awaiting_recovery) ResolveAgain(task);
  });
  RAIO_LOG_INFO(
      "{} could not read an argument (attempt {}); it runs again once the node "
      "that held it is declared dead and the argument is made again",
      t->request.spec().function_name(), t->attempt);
  return true;
}

void TaskSubmitter::ResolveAgain(TaskEntry* t) {
  t->awaiting_recovery = false;
  if (t->recovery_timer) t->recovery_timer->cancel();
  ++t->attempt;
  std::vector<RefArg> ref_args;
  const auto& args = t->request.spec().args();
  for (int i = 0; i < args.size(); ++i) {
    if (args[i].in_store() && args[i].kind_case() == proto::TaskArg::kObjectId) {
      ref_args.push_back(RefArg{i, {ObjectId::FromBinary(args[i].object_id())}, false});
    }
  }
  // The new resolution takes its references before the old ones go (an argument held only
  // by this task would be freed in between).
  std::vector<ObjectId> old = std::exchange(t->arg_refs, {});
  ResolveOrEnqueue(t, std::move(ref_args));
  for (const ObjectId& ref : old) objects_.RemoveTaskArgRef(ref);
}

}  // namespace raio::worker
