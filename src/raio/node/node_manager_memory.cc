// NodeManager's memory monitor (see node_manager.h and memory_monitor.h): every interval
// it measures the node's memory use and, above the threshold, ends the leased worker with
// the largest resident set, remembering why so that the worker's owner can ask
// (GET_WORKER_FAILURE_CAUSE, answered here).
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/common/process.h"
#include "raio/node/node_manager.h"

namespace raio::node {

using ConnPtr = std::shared_ptr<rpc::Connection>;

void NodeManager::AnswerFailureCause(const ConnPtr& conn, const rpc::FrameHeader& h,
                                     const WorkerId& worker, int tries_left) {
  ReapWorkers();
  auto it = failure_causes_.find(worker);
  if (it != failure_causes_.end() || tries_left <= 0 ||
      (!pool_.IsUnreaped(worker) && pool_.Find(worker) == nullptr)) {
    conn->Reply(h, it == failure_causes_.end() ? proto::WorkerFailureCause() : it->second);
    return;
  }
  // Its connection closed as it exited, before it could be reaped: look again shortly.
  auto timer = std::make_shared<Timer>(loop_.io());
  timer->expires_after(config::worker_exit_poll_interval_ms());
  timer->async_wait(
      [this, timer, conn, h, worker, tries_left](const boost::system::error_code& ec) {
        if (ec || stopped_) return;
        AnswerFailureCause(conn, h, worker, tries_left - 1);
      });
}

void NodeManager::ArmMemoryTimer() {
  if (!memory_timer_) memory_timer_ = std::make_unique<Timer>(loop_.io());
  memory_timer_->expires_after(memory_monitor_.interval);
  memory_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    CheckMemory();
    ArmMemoryTimer();
  });
}

void NodeManager::CheckMemory() {
  // One victim at a time: its memory is only free once its process has been reaped;
  // measuring before would end a second worker for the same pressure.
  if (oom_victim_pid_ > 0) {
    if (!pool_.IsReaped(oom_victim_pid_)) return;
    oom_victim_pid_ = -1;
  }
  absl::StatusOr<MemoryUsage> usage = ReadMemoryUsage(memory_monitor_.usage_file_path);
  if (!usage.ok()) {
    if (!warned_unreadable_) {
      RAIO_LOG_WARN("memory monitor: cannot measure memory use: {}", usage.status().message());
    }
    warned_unreadable_ = true;
    return;
  }
  const uint64_t threshold = ThresholdBytes(memory_monitor_, usage->total_bytes);
  if (usage->used_bytes <= threshold) {
    warned_no_victim_ = false;
    return;
  }
  // Leased workers only: the daemon, drivers and idle or starting workers are never ended.
  std::vector<VictimCandidate> candidates;
  for (const auto& [id, w] : pool_.workers()) {
    if (w.state != WorkerProcess::State::kLeased || w.pid <= 0) continue;
    absl::StatusOr<uint64_t> rss = ReadRssBytes(w.pid);
    if (!rss.ok()) continue;  // exited meanwhile; the reaper will see it
    VictimCandidate c;
    c.worker = id;
    c.pid = w.pid;
    c.rss_bytes = *rss;
    c.is_actor = w.hosts_actor;
    if (w.hosts_actor) {
      c.description = "hosting an actor";
    } else {
      auto lit = leases_.find(w.lease);
      c.description = absl::StrCat("leased for ",
                                   lit == leases_.end() || lit->second.spec.function_name().empty()
                                       ? std::string("tasks")
                                       : lit->second.spec.function_name());
    }
    candidates.push_back(std::move(c));
  }
  std::optional<std::size_t> pick = ChooseVictim(candidates);
  if (!pick) {
    if (!warned_no_victim_) {
      RAIO_LOG_WARN(
          "memory monitor: node memory use {} of {} is above the threshold {}, but no "
          "leased worker is running to end",
          FormatBytes(usage->used_bytes), FormatBytes(usage->total_bytes), FormatBytes(threshold));
    }
    warned_no_victim_ = true;
    return;
  }
  const VictimCandidate& victim = candidates[*pick];
  std::string message = DescribeKill(id_.Hex(), victim, *usage, threshold, memory_monitor_);
  RAIO_LOG_WARN("{}", message);
  proto::WorkerFailureCause cause;
  cause.set_kind(proto::WorkerFailureCause::OUT_OF_MEMORY);
  cause.set_message(message);
  cause.set_node_used_bytes(usage->used_bytes);
  cause.set_node_total_bytes(usage->total_bytes);
  cause.set_threshold_bytes(threshold);
  cause.set_pid(victim.pid);
  cause.set_rss_bytes(victim.rss_bytes);
  if (auto running = pool_.RunningTask(victim.worker)) {
    cause.set_running_task_known(true);
    cause.set_running_task_id(*running);
  }
  // Before the kill: the owner asks as soon as its connection breaks.
  RememberFailureCause(victim.worker, std::move(cause));
  oom_victim_pid_ = victim.pid;
  OnWorkerGone(victim.worker, message);
}

void NodeManager::RememberFailureCause(const WorkerId& id, proto::WorkerFailureCause cause) {
  if (failure_causes_.insert_or_assign(id, std::move(cause)).second) failure_order_.push_back(id);
  while (failure_order_.size() >
         static_cast<std::size_t>(config::max_remembered_worker_failures())) {
    failure_causes_.erase(failure_order_.front());
    failure_order_.pop_front();
  }
}

}  // namespace raio::node
