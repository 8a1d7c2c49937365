#include "raio/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/raio.h"
#include "raio/train/checkpoint_manager.h"
#include "raio/train/registry.h"
#include "raio/train/worker.h"

namespace raio::train {
namespace {

using internal::CheckpointManager;
using internal::ReportRecord;
using internal::RunOutcome;
using internal::TrainWorker;
using Clock = std::chrono::steady_clock;

// How often the trainer looks at its workers (the wait inside rank 0's Poll).
constexpr int kPollWaitMs = 100;
// After the first failure of a group, how long the others get to end on their own (their
// collectives fail as the failed rank's connections close) before they are killed.
constexpr auto kFailureGrace = std::chrono::seconds(5);
// Setup is one quick call, but a worker process may take a while to start.
constexpr auto kSetupTimeout = std::chrono::seconds(120);
// Elastic sizing: how long a group of one size may stay pending before the trainer tries
// one worker fewer (a group that fits is created in milliseconds), and how long a growth
// probe stays pending at the head before it is removed, then how long until the next one
// (a pending probe holds back later groups that want the same resources).
constexpr int kElasticSizeWaitSeconds = 2;
constexpr auto kProbeWindow = std::chrono::seconds(2);
constexpr auto kProbeBackoff = std::chrono::seconds(5);
// Restarts: an attempt that ends within kQuickAttempt counts as quick; quick ones in a row
// wait 1, 2, 4 ... s before the next, at most kMaxRestartBackoff.
constexpr auto kQuickAttempt = std::chrono::seconds(10);
constexpr auto kMaxRestartBackoff = std::chrono::milliseconds(30000);

const char* StrategyName(PlacementStrategy s) {
  switch (s) {
    case PlacementStrategy::PACK:
      return "PACK";
    case PlacementStrategy::SPREAD:
      return "SPREAD";
    case PlacementStrategy::STRICT_PACK:
      return "STRICT_PACK";
    case PlacementStrategy::STRICT_SPREAD:
      return "STRICT_SPREAD";
  }
  return "?";
}

std::string ResourcesText(const std::map<std::string, double>& resources) {
  return absl::StrCat("{",
                      absl::StrJoin(resources, ", ",
                                    [](std::string* out, const auto& kv) {
                                      absl::StrAppend(out, kv.first, ": ", kv.second);
                                    }),
                      "}");
}

absl::Status ValidateName(const std::string& name) {
  bool ok = !name.empty() && name != "." && name != "..";
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "RunConfig.name \"", name, "\" must be letters, digits, '-', '_' or '.' (not . or ..)"));
}

std::string DefaultStoragePath() {
  const char* home = std::getenv("HOME");
  return home != nullptr && *home != '\0' ? std::string(home) + "/raio_results"
                                          : "/tmp/raio_results";
}

std::string DefaultName() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "train_%Y-%m-%d_%H-%M-%S", &tm);
  // A random tail, as Ray's trial names have: two runs started in one second get two runs.
  return absl::StrCat(buf, "_", absl::Hex(std::random_device{}() & 0xffffff, absl::kZeroPad6));
}

// How one attempt of the group ended.
struct AttemptEnd {
  absl::Status status;
  bool retryable = false;  // a worker died or the group could not start: restart it
  bool resize = false;     // elastic: more workers fit now; restart from the checkpoint
};

AttemptEnd Fatal(absl::Status s) { return AttemptEnd{std::move(s), false}; }
AttemptEnd Retry(absl::Status s) { return AttemptEnd{std::move(s), true}; }
// The driver lost its cluster (its node or the head is gone): no restart can help.
AttemptEnd Lost(const ClusterUnavailableError& e) {
  return Fatal(absl::UnavailableError(
      absl::StrCat("the driver lost the cluster, so the run cannot go on: ", e.what())));
}

// Rank `rank`'s shard of `rows` over `world` ranks: positions rank, rank + world, ... of
// the rows padded by repeating their head to a multiple of `world`.
Dataset Shard(const Dataset& rows, int world, int rank) {
  Dataset shard;
  if (rows.empty()) return shard;
  const size_t per_rank = (rows.size() + world - 1) / world;
  shard.reserve(per_rank);
  for (size_t i = 0; i < per_rank; ++i) {
    shard.push_back(rows[(i * world + rank) % rows.size()]);
  }
  return shard;
}

// One start of the worker group: reserve, start, run, watch, tear down.
class Attempt {
 public:
  Attempt(const ScalingConfig& scaling, const RunConfig& run,
          std::map<std::string, double> per_worker, CheckpointManager& checkpoints, Result& result)
      : scaling_(scaling),
        run_(run),
        per_worker_(std::move(per_worker)),
        min_workers_(scaling.min_workers.value_or(scaling.num_workers)),
        checkpoints_(checkpoints),
        result_(result) {}
  ~Attempt() { TearDown(); }

  AttemptEnd Run(internal::WorkerInit base, const Datasets& datasets);

 private:
  std::string Demand(int n) const {
    return absl::StrCat(n, " workers x ", ResourcesText(per_worker_), " (",
                        StrategyName(scaling_.placement_strategy), ")");
  }
  // Reserves the largest group in [min_workers_, num_workers] that the cluster creates now
  // (elastic), else waits for min_workers_; sets n_.
  AttemptEnd Reserve();
  AttemptEnd ReserveAndWait(int n);
  // Creates the n-worker group into group_ (not waiting for it); an end on error.
  std::optional<AttemptEnd> CreateGroup(int n);
  // Elastic growth: true when a probe bundle was created and a checkpoint came after it.
  bool ShouldGrow(bool checkpointed);
  void RemoveProbe();
  // Takes rank 0's reports; false when rank 0 cannot be reached.
  bool PollReports(int wait_ms, std::chrono::milliseconds timeout);
  // True when one of them carried a checkpoint.
  bool TakeReports(const std::vector<ReportRecord>& records);
  void TearDown();

  const ScalingConfig& scaling_;
  const RunConfig& run_;
  const std::map<std::string, double> per_worker_;
  const int min_workers_;
  CheckpointManager& checkpoints_;
  Result& result_;
  int n_ = 0;
  PlacementGroup group_;
  PlacementGroup probe_;
  bool probe_created_ = false;
  Clock::time_point probe_started_{};
  Clock::time_point next_probe_{};
  bool checkpointed_ = false;  // the last PollReports took a checkpoint
  std::vector<ActorHandle<TrainWorker>> workers_;
  std::vector<internal::WorkerInfo> infos_;
};

// Removes `pg` if it is set, ignoring errors (the head may be gone), and clears it.
void RemoveQuietly(PlacementGroup& pg) {
  if (pg.Empty()) return;
  try {
    RemovePlacementGroup(pg.GetID());
  } catch (const RaioException&) {
  }
  pg = PlacementGroup();
}

std::optional<AttemptEnd> Attempt::CreateGroup(int n) {
  PlacementGroupCreationOptions options;
  options.bundles.assign(n, per_worker_);
  options.strategy = scaling_.placement_strategy;
  try {
    group_ = CreatePlacementGroup(options);
  } catch (const ClusterUnavailableError& e) {
    return Lost(e);
  } catch (const InvalidUsageError& e) {
    return Fatal(absl::InvalidArgumentError(
        absl::StrCat("the scaling config ", Demand(n), " is not a valid demand: ", e.what())));
  } catch (const RaioException& e) {
    return Retry(
        absl::UnavailableError(absl::StrCat("cannot reserve ", Demand(n), ": ", e.what())));
  }
  return std::nullopt;
}

AttemptEnd Attempt::Reserve() {
  for (int n = scaling_.num_workers; n > min_workers_; --n) {
    if (std::optional<AttemptEnd> end = CreateGroup(n)) return *end;
    bool created = false;
    try {
      created = group_.Wait(kElasticSizeWaitSeconds);
    } catch (const UnschedulableError&) {  // never fits: try fewer
    } catch (const ClusterUnavailableError& e) {
      return Lost(e);
    } catch (const RaioException& e) {
      return Retry(absl::UnavailableError(
          absl::StrCat("the placement group for ", Demand(n), " failed: ", e.what())));
    }
    if (created) {
      n_ = n;
      return AttemptEnd{};
    }
    RemoveQuietly(group_);
  }
  return ReserveAndWait(min_workers_);
}

AttemptEnd Attempt::ReserveAndWait(int n) {
  n_ = n;
  if (std::optional<AttemptEnd> end = CreateGroup(n)) return *end;
  const auto start = Clock::now();
  bool warned = false;
  while (true) {
    try {
      if (group_.Wait(1)) return AttemptEnd{};
    } catch (const UnschedulableError& e) {
      return Fatal(absl::FailedPreconditionError(
          absl::StrCat("no cluster can meet the scaling config: ", Demand(n), ": ", e.what())));
    } catch (const ClusterUnavailableError& e) {
      return Lost(e);
    } catch (const RaioException& e) {
      return Retry(absl::UnavailableError(
          absl::StrCat("the placement group for ", Demand(n), " failed: ", e.what())));
    }
    const auto waited = Clock::now() - start;
    if (scaling_.placement_timeout && waited >= *scaling_.placement_timeout) {
      return Fatal(absl::DeadlineExceededError(absl::StrCat(
          "the cluster did not free ", Demand(n), " within ", scaling_.placement_timeout->count(),
          " s (ScalingConfig.placement_timeout)")));
    }
    if (!warned && waited > std::chrono::seconds(10)) {
      std::cerr << "raio.train: waiting for the cluster to free " << Demand(n) << "\n";
      warned = true;
    }
  }
}

bool Attempt::TakeReports(const std::vector<ReportRecord>& records) {
  bool checkpointed = false;
  for (const ReportRecord& r : records) {
    result_.metrics_history.push_back(r.metrics);
    checkpointed = checkpointed || r.checkpoint_index >= 0;
    if (run_.on_report) {
      try {
        run_.on_report(r.metrics);
      } catch (const std::exception& e) {
        std::cerr << "raio.train: RunConfig.on_report threw: " << e.what() << "\n";
      }
    }
  }
  if (checkpointed) {
    absl::StatusOr<std::vector<Checkpoint>> fresh = checkpoints_.Rescan();
    if (!fresh.ok()) std::cerr << "raio.train: " << fresh.status().message() << "\n";
  }
  return checkpointed;
}

bool Attempt::PollReports(int wait_ms, std::chrono::milliseconds timeout) {
  checkpointed_ = false;
  if (workers_.empty()) return false;
  try {
    checkpointed_ = TakeReports(workers_[0].Task(&TrainWorker::Poll).Remote(wait_ms).Get(timeout));
    return true;
  } catch (const RaioException&) {
    return false;
  }
}

void Attempt::RemoveProbe() {
  RemoveQuietly(probe_);
  probe_created_ = false;
}

bool Attempt::ShouldGrow(bool checkpointed) {
  if (n_ >= scaling_.num_workers) return false;
  const auto now = Clock::now();
  if (probe_.Empty()) {
    if (now < next_probe_) return false;
    PlacementGroupCreationOptions options;
    options.bundles.assign(1, per_worker_);
    try {
      probe_ = CreatePlacementGroup(options);
      probe_started_ = now;
    } catch (const RaioException& e) {
      std::cerr << "raio.train: cannot probe for free resources: " << e.what() << "\n";
      next_probe_ = now + kProbeBackoff;
    }
    return false;
  }
  if (!probe_created_) {
    try {
      probe_created_ = probe_.GetState() == PlacementGroupState::CREATED;
    } catch (const RaioException&) {
    }
    if (!probe_created_ && now - probe_started_ >= kProbeWindow) {
      RemoveProbe();
      next_probe_ = now + kProbeBackoff;
    }
    return false;  // a checkpoint after the probe was created, not the one before
  }
  return checkpointed;
}

void Attempt::TearDown() {
  RemoveProbe();
  for (const auto& worker : workers_) {
    try {
      worker.Kill(/*no_restart=*/true);
    } catch (const RaioException&) {
    }
  }
  workers_.clear();
  RemoveQuietly(group_);
}

AttemptEnd Attempt::Run(internal::WorkerInit base, const Datasets& datasets) {
  if (AttemptEnd end = Reserve(); !end.status.ok()) return end;
  const int n = n_;
  result_.world_sizes.push_back(n);
  try {
    for (int rank = 0; rank < n; ++rank) {
      internal::WorkerInit init = base;
      init.world_rank = rank;
      init.world_size = n;
      workers_.push_back(raio::Actor(TrainWorker::Create)
                             .SetPlacementGroup(group_, rank)
                             .SetResources(per_worker_)
                             .SetMaxConcurrency(2)  // Run, and Poll beside it
                             .Remote(init));
    }
    std::vector<ObjectRef<internal::WorkerInfo>> setups;
    for (const auto& worker : workers_) setups.push_back(worker.Task(&TrainWorker::Setup).Remote());
    for (const auto& setup : setups) infos_.push_back(setup.Get(kSetupTimeout));
  } catch (const RaioException& e) {
    return Retry(absl::UnavailableError(absl::StrCat("the workers did not start: ", e.what())));
  }
  if (!infos_[0].error.empty()) return Retry(absl::UnavailableError(infos_[0].error));

  // Local ranks: ranks on one node in rank order; nodes numbered by their lowest rank.
  std::map<std::string, int> node_rank, node_size;
  for (const auto& info : infos_) {
    node_rank.emplace(info.node_id, static_cast<int>(node_rank.size()));
    ++node_size[info.node_id];
  }
  std::map<std::string, int> seen_on_node;
  std::vector<ObjectRef<RunOutcome>> runs;
  for (int rank = 0; rank < n; ++rank) {
    internal::RunArgs args;
    args.store_host = infos_[0].ip;
    args.store_port = infos_[0].store_port;
    args.local_rank = seen_on_node[infos_[rank].node_id]++;
    args.local_world_size = node_size[infos_[rank].node_id];
    args.node_rank = node_rank[infos_[rank].node_id];
    for (const auto& [name, rows] : datasets) args.dataset_shards[name] = Shard(rows, n, rank);
    runs.push_back(workers_[rank].Task(&TrainWorker::Run).Remote(args));
  }

  // Watch: rank 0's reports, and the runs as they end.
  std::vector<std::optional<RunOutcome>> outcomes(n);
  std::vector<std::string> deaths(n);
  int settled = 0;
  bool failed = false;
  bool grow = false;
  auto settle = [&](std::optional<std::chrono::milliseconds> wait) {
    std::vector<ObjectRef<RunOutcome>> pending;
    for (int r = 0; r < n; ++r) {
      if (!outcomes[r] && deaths[r].empty()) pending.push_back(runs[r]);
    }
    if (pending.empty()) return;
    WaitResult<RunOutcome> waited = raio::Wait(pending, static_cast<int>(pending.size()),
                                               wait.value_or(std::chrono::milliseconds(0)));
    for (int r = 0; r < n; ++r) {
      if (outcomes[r] || !deaths[r].empty()) continue;
      bool ready = false;
      for (const auto& ref : waited.ready) ready = ready || ref.ID() == runs[r].ID();
      if (!ready) continue;
      ++settled;
      try {
        outcomes[r] = runs[r].Get();
        failed = failed || !outcomes[r]->ok;
      } catch (const RaioException& e) {
        deaths[r] = e.what();
        failed = true;
      }
    }
  };
  while (true) {
    const bool rank0_alive = PollReports(kPollWaitMs, std::chrono::seconds(10));
    settle(rank0_alive
               ? std::nullopt
               : std::optional<std::chrono::milliseconds>(std::chrono::milliseconds(kPollWaitMs)));
    if (failed || settled == n) break;
    if (rank0_alive && ShouldGrow(checkpointed_)) {
      grow = true;
      break;
    }
  }
  if (grow) {
    std::cerr << "raio.train: resources for more workers are free; restarting the group of " << n
              << " from its latest checkpoint with up to " << scaling_.num_workers << "\n";
    AttemptEnd end;
    end.resize = true;
    return end;
  }
  if (failed) settle(std::chrono::duration_cast<std::chrono::milliseconds>(kFailureGrace));
  PollReports(0, std::chrono::seconds(2));  // what rank 0 reported last, if it is alive

  for (int r = 0; r < n; ++r) {
    if (!deaths[r].empty()) {
      return Retry(absl::UnavailableError(absl::StrCat("worker rank ", r, " (pid ", infos_[r].pid,
                                                       " on node ", infos_[r].node_id,
                                                       ") died: ", deaths[r])));
    }
  }
  int first = -1;
  for (int r = 0; r < n; ++r) {
    if (outcomes[r] && !outcomes[r]->ok &&
        (first < 0 || outcomes[r]->failed_at_us < outcomes[first]->failed_at_us)) {
      first = r;
    }
  }
  if (first >= 0) {
    return Fatal(absl::UnknownError(absl::StrCat("worker rank ", first, " raised ",
                                                 outcomes[first]->error_type, ": ",
                                                 outcomes[first]->error_message)));
  }
  return AttemptEnd{};
}

}  // namespace

Trainer::Trainer(TrainFunction train_fn, ScalingConfig scaling_config, RunConfig run_config,
                 nlohmann::json train_loop_config, Datasets datasets)
    : train_fn_(train_fn),
      scaling_(std::move(scaling_config)),
      run_(std::move(run_config)),
      train_loop_config_(std::move(train_loop_config)),
      datasets_(std::move(datasets)) {}

Result Trainer::Fit() {
  Result result;
  RunConfig run = run_;
  if (run.name.empty()) run.name = DefaultName();
  if (run.storage_path.empty()) run.storage_path = DefaultStoragePath();
  result.path = run.storage_path + "/" + run.name;
  auto fail = [&result](absl::Status s) {
    result.error = std::move(s);
    return result;
  };

  // Everything that can be checked before a worker starts.
  if (absl::Status s = ValidateName(run.name); !s.ok()) return fail(s);
  if (scaling_.num_workers < 1) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("ScalingConfig.num_workers must be at least 1, got ", scaling_.num_workers)));
  }
  if (scaling_.min_workers &&
      (*scaling_.min_workers < 1 || *scaling_.min_workers > scaling_.num_workers)) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "ScalingConfig.min_workers must be in [1, num_workers = ", scaling_.num_workers, "], got ",
        *scaling_.min_workers)));
  }
  if (run.failure_config.max_failures < -1) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("FailureConfig.max_failures must be -1 (no limit) or at least 0, got ",
                     run.failure_config.max_failures)));
  }
  std::map<std::string, double> per_worker = scaling_.resources_per_worker;
  if (per_worker.empty()) per_worker["CPU"] = 1;
  if (scaling_.use_gpu && !per_worker.count("GPU")) per_worker["GPU"] = 1;
  for (const auto& [name, amount] : per_worker) {
    if (!std::isfinite(amount) || amount <= 0) {
      return fail(
          absl::InvalidArgumentError(absl::StrCat("ScalingConfig.resources_per_worker[\"", name,
                                                  "\"] must be finite and above 0, got ", amount)));
    }
  }
  if (!raio::IsInitialized()) {
    return fail(absl::FailedPreconditionError(
        "raio is not initialized: call raio::Init(argc, argv) at the top of main"));
  }
  absl::StatusOr<std::string> function_name = internal::TrainFunctionName(train_fn_);
  if (!function_name.ok()) return fail(function_name.status());
  absl::StatusOr<CheckpointManager> checkpoints =
      CheckpointManager::Create(result.path, run.checkpoint_config);
  if (!checkpoints.ok()) return fail(checkpoints.status());

  internal::WorkerInit base;
  base.function_name = *function_name;
  base.config_json = train_loop_config_.dump();
  base.num_threads = std::max(1, static_cast<int>(per_worker.count("CPU") ? per_worker["CPU"] : 1));
  base.experiment_name = run.name;
  base.run_path = result.path;

  int quick_failures = 0;  // restarts in a row whose attempt ended within kQuickAttempt
  for (int attempt = 0;; ++attempt) {
    const auto attempt_start = Clock::now();
    std::optional<Checkpoint> latest = checkpoints->latest();
    base.attempt = attempt;
    base.checkpoint_path = latest ? latest->path : "";
    base.next_checkpoint_index = checkpoints->next_index();
    AttemptEnd end;
    {
      Attempt group(scaling_, run, per_worker, *checkpoints, result);
      end = group.Run(base, datasets_);
    }  // workers killed, group removed
    // Checkpoints rank 0 persisted but could not report (it died first) count as reports.
    if (absl::StatusOr<std::vector<Checkpoint>> fresh = checkpoints->Rescan(); fresh.ok()) {
      for (const Checkpoint& c : *fresh) result.metrics_history.push_back(c.metrics);
    }
    if (end.resize) continue;  // elastic growth: not a failure
    if (end.status.ok()) break;
    if (!end.retryable) {
      result.error = end.status;
      break;
    }
    const int max = run.failure_config.max_failures;
    if (max >= 0 && result.num_failures >= max) {
      result.error = absl::UnavailableError(absl::StrCat(
          "training failed after ", result.num_failures, " restart(s) (FailureConfig.max_failures ",
          max, "): ", end.status.message()));
      break;
    }
    ++result.num_failures;
    // Back off when attempts keep failing fast (a group that cannot start, workers that die
    // at once): 1, 2, 4 ... 30 s, so that a restart loop never spins.
    quick_failures = Clock::now() - attempt_start < kQuickAttempt ? quick_failures + 1 : 0;
    const auto backoff = std::min<std::chrono::milliseconds>(
        kMaxRestartBackoff,
        std::chrono::milliseconds(int64_t{1000} << std::clamp(quick_failures - 1, 0, 5)));
    std::optional<Checkpoint> from = checkpoints->latest();
    std::cerr << "raio.train: " << run.name << ": " << end.status.message()
              << "; restarting the worker group from "
              << (from ? from->path : std::string("the start")) << " (failure "
              << result.num_failures << (max < 0 ? std::string() : absl::StrCat(" of ", max)) << ")"
              << (quick_failures > 0 ? absl::StrCat(" in ", backoff.count(), " ms") : "") << "\n";
    if (quick_failures > 0) std::this_thread::sleep_for(backoff);
  }
  result.checkpoint = checkpoints->latest();
  result.best_checkpoint = checkpoints->best();
  result.best_checkpoints = checkpoints->kept();
  if (!result.metrics_history.empty()) result.metrics = result.metrics_history.back();
  return result;
}

}  // namespace raio::train
