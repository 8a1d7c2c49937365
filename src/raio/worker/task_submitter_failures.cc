// TaskSubmitter's part in failures: a leased worker that died (its node asked why, the
// task retried or failed: WORKER_CRASHED, OUT_OF_MEMORY, NODE_DIED), nodes that died
// (NODE_REMOVED), and the owner's own node going away (FailAll). See task_submitter.h.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/worker/task_submitter.h"

namespace raio::worker {

void TaskSubmitter::OnFailureCause(const std::shared_ptr<LeaseState>& lease,
                                   absl::StatusOr<proto::WorkerFailureCause> reply) {
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  // No answer in time (or an old node): a plain crash. A node that cannot be reached at
  // all (its connection refused or closed) went with its worker.
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kUnavailable) {
    if (lease->remote) {
      RememberDeadNode(lease->node_id_hex,
                       absl::StrCat("its daemon cannot be reached: ", reply.status().message()));
    } else if (own_node_lost_.empty()) {
      // This process's own node: its connection is going (FailAll follows), whether the
      // node lost the cluster (its notice raced the worker's death) or crashed.
      OnOwnNodeLost(absl::StrCat("this process's node (", node_id_hex_,
                                 ") cannot be reached: ", reply.status().message()));
    }
  }
  proto::WorkerFailureCause cause = reply.ok() ? std::move(*reply) : proto::WorkerFailureCause();
  lease->failure_cause = cause;
  std::vector<std::pair<TaskEntry*, std::string>> failed;
  for (auto& [id, why] : std::exchange(lease->awaiting_cause, {})) {
    TaskEntry* t = FindTask(id);
    if (t == nullptr) continue;  // completed meanwhile (FailAll)
    if (t->pushed_to != lease) continue;
    failed.emplace_back(t, std::move(why));
  }
  std::sort(failed.begin(), failed.end(),
            [](const auto& a, const auto& b) { return a.first->push_seq < b.first->push_seq; });
  // Re-queued at the front newest first, so that they keep their order.
  std::set<SchedulingClass*> classes;
  for (auto it = failed.rbegin(); it != failed.rend(); ++it) {
    bool was_running = WasRunning(*lease, cause, *it->first, /*oldest=*/it + 1 == failed.rend());
    classes.insert(it->first->cls);
    RetryOrFail(it->first, cause, it->second, was_running);
  }
  if (!failed.empty()) lease->crash_charged = true;
  for (SchedulingClass* cls : classes) Dispatch(cls);
}

bool TaskSubmitter::WasRunning(const LeaseState& lease, const proto::WorkerFailureCause& cause,
                               const TaskEntry& t, bool oldest) {
  if (lease.crash_charged) return false;  // already found, or we ended the worker (Cancel)
  // The node read which task the worker had started ("" between tasks).
  if (cause.running_task_known()) return t.request.spec().task_id() == cause.running_task_id();
  // Unknown: the worker ran its tasks in push order, so the oldest unanswered one is the
  // best guess (its reply may have been coalesced with a later task's and lost).
  return oldest;
}

void TaskSubmitter::RetryOrFail(TaskEntry* t, const proto::WorkerFailureCause& cause,
                                const std::string& why, bool was_running) {
  const WorkerId worker = t->pushed_to ? t->pushed_to->worker : WorkerId();
  // Where it died: its worker's node (another one than this process's after a spillback).
  const std::string node =
      t->pushed_to && !t->pushed_to->node_id_hex.empty() ? t->pushed_to->node_id_hex : node_id_hex_;
  t->pushed_to.reset();
  const std::string& fn = t->request.spec().function_name();
  const bool oom = cause.kind() == proto::WorkerFailureCause::OUT_OF_MEMORY;
  if (t->cancelled) {
    Fail(t, MakeError(proto::TASK_CANCELLED, absl::StrCat(fn, " was cancelled"), fn, node_id_hex_));
    return;
  }
  if (!own_node_lost_.empty()) {
    // The node ended its workers as it lost the cluster: nowhere to retry (FailAll follows).
    Fail(t, MakeError(proto::CLUSTER_UNAVAILABLE, own_node_lost_, fn, node_id_hex_));
    return;
  }
  // The attempt number rises either way: registrations made on the caller's behalf by a
  // dead attempt must not count for the next (see ObjectTable::AddBorrowerOnBehalf).
  if (!was_running) {
    ++t->attempt;
    RAIO_LOG_DEBUG("worker {} died with {} queued on it; re-queued", worker.Hex(), fn);
    t->cls->queue.push_front(t->task_id);
    return;
  }
  ++t->crashes;
  if (t->retries_left != 0) {  // negative: unlimited
    if (t->retries_left > 0) --t->retries_left;
    ++t->attempt;
    if (oom) {
      RAIO_LOG_WARN("{} ran out of memory: {}; retrying (attempt {})", fn, cause.message(),
                    t->attempt);
    } else {
      RAIO_LOG_INFO("worker {} died running {}; retrying (attempt {})", worker.Hex(), fn,
                    t->attempt);
    }
    t->cls->queue.push_front(t->task_id);
    return;
  }
  const int attempts = t->crashes;
  if (auto dead = dead_nodes_.find(node); dead != dead_nodes_.end() && !oom) {
    Fail(t, MakeError(proto::NODE_DIED,
                      absl::StrCat("node ", node, " died while running ", fn, " (", dead->second,
                                   ") and its ", attempts - 1, " retries ran out"),
                      fn, node));
    return;
  }
  if (oom) {
    Fail(t,
         MakeError(proto::OUT_OF_MEMORY,
                   absl::StrCat(fn, " ran out of memory on node ", node, ": ", cause.message(),
                                "; ", attempts, attempts == 1 ? " attempt was" : " attempts were",
                                " made and its retries ran out"),
                   fn, node));
  } else {
    Fail(t,
         MakeError(proto::WORKER_CRASHED,
                   absl::StrCat(
                       "the worker process running ", fn, " on node ", node, " died (",
                       cause.kind() == proto::WorkerFailureCause::CRASHED ? cause.message() : why,
                       ") and its ", attempts - 1, " retries ran out"),
                   fn, node));
  }
}

void TaskSubmitter::RememberDeadNode(const std::string& node_id_hex, const std::string& cause) {
  if (node_id_hex.empty() || !dead_nodes_.emplace(node_id_hex, cause).second) return;
  dead_node_order_.push_back(node_id_hex);
  constexpr std::size_t kMaxDeadNodes = 1000;
  if (dead_node_order_.size() > kMaxDeadNodes) {
    dead_nodes_.erase(dead_node_order_.front());
    dead_node_order_.pop_front();
  }
}

void TaskSubmitter::OnNodeRemoved(const proto::NodeRemovedNotice& notice) {
  RememberDeadNode(notice.node_id(), notice.cause());
  const std::string why = absl::StrCat("node ", notice.node_id(), " died: ", notice.cause());
  for (auto& [key, cls] : classes_) {
    for (auto it = cls->leases.begin(); it != cls->leases.end();) {
      const std::shared_ptr<LeaseState>& lease = it->second;
      if (lease->node_id_hex != notice.node_id()) {
        ++it;
        continue;
      }
      // The close fails its pushed tasks (asynchronously): they retry or fail as NODE_DIED.
      // No task is pushed there meanwhile.
      if (lease->conn) lease->conn->Close(absl::UnavailableError(why));
      lease->dead = true;
      cls->saturated = false;
      it = cls->leases.erase(it);
    }
  }
  // Objects whose only copies were there are made again (their tasks re-run elsewhere).
  RecoverObjectsOn(notice.node_id(), notice.cause());
}

void TaskSubmitter::FailAll(const std::string& why) {
  for (auto& [key, cls] : classes_) FailQueued(cls.get(), proto::CLUSTER_UNAVAILABLE, why);
  std::vector<TaskId> rest;
  for (auto& [id, t] : tasks_) rest.push_back(id);
  for (const TaskId& id : rest) {
    TaskEntry* t = FindTask(id);
    if (t == nullptr) continue;
    if (t->resolving) resolver_.Cancel(id);
    std::string fn = t->request.spec().function_name();
    Fail(t, MakeError(proto::CLUSTER_UNAVAILABLE, why, fn, node_id_hex_));
  }
}

}  // namespace raio::worker
