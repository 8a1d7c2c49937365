#include "raio/train/worker.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "raio/train/checkpoint_manager.h"
#include "raio/train/context.h"
#include "raio/train/registry.h"

namespace raio::train::internal {
namespace {

// How long a rank waits for the others at the store and at the process group's connection.
constexpr std::chrono::minutes kRendezvousTimeout{5};

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The node's address as the node daemon gave it to its workers (127.0.0.1 on the embedded
// cluster); Gloo listens there and rank 0's store is reached there.
std::string NodeIp() {
  const char* ip = std::getenv("RAIO_NODE_IP");
  return ip != nullptr && *ip != '\0' ? ip : "127.0.0.1";
}

RunOutcome Failed(std::string type, std::string message) {
  return RunOutcome{false, std::move(type), std::move(message), NowUs()};
}

}  // namespace

struct TrainWorker::Rendezvous {
  c10::intrusive_ptr<c10d::TCPStore> server;
};

TrainWorker* TrainWorker::Create(WorkerInit init) { return new TrainWorker(std::move(init)); }

TrainWorker::TrainWorker(WorkerInit init)
    : init_(std::move(init)), next_checkpoint_index_(init_.next_checkpoint_index) {}

TrainWorker::~TrainWorker() = default;

WorkerInfo TrainWorker::Setup() {
  WorkerInfo info;
  info.pid = static_cast<int>(::getpid());
  info.node_id = raio::GetNodeId();
  info.ip = NodeIp();
  if (init_.world_rank == 0 && rendezvous_ == nullptr) {
    try {
      c10d::TCPStoreOptions options;
      options.port = 0;  // the kernel picks a free port; the trainer hands it to the others
      options.isServer = true;
      options.waitWorkers = false;
      options.timeout = kRendezvousTimeout;
      auto rendezvous = std::make_unique<Rendezvous>();
      rendezvous->server = c10::make_intrusive<c10d::TCPStore>(info.ip, options);
      info.store_port = rendezvous->server->getPort();
      rendezvous_ = std::move(rendezvous);
    } catch (const std::exception& e) {
      info.error = absl::StrCat("cannot open the rendezvous store on ", info.ip, ": ", e.what());
    }
  }
  return info;
}

void TrainWorker::Report(const Metrics& metrics, const std::optional<std::string>& checkpoint_dir) {
  if (init_.world_rank != 0) return;  // rank 0's metrics and checkpoint are the run's
  ReportRecord record;
  record.metrics = metrics;
  if (checkpoint_dir) {
    absl::StatusOr<Checkpoint> persisted = PersistCheckpoint(
        init_.run_path, next_checkpoint_index_, *checkpoint_dir, metrics, init_.world_size);
    if (!persisted.ok()) {
      if (absl::IsInvalidArgument(persisted.status())) {
        throw raio::InvalidUsageError("TrainContext::Report: " +
                                      std::string(persisted.status().message()));
      }
      throw raio::RaioException("TrainContext::Report: " +
                                std::string(persisted.status().message()));
    }
    ++next_checkpoint_index_;
    record.checkpoint_path = persisted->path;
    record.checkpoint_index = persisted->index;
  }
  absl::MutexLock lock(&mu_);
  reports_.push_back(std::move(record));
}

std::vector<ReportRecord> TrainWorker::Poll(int wait_ms) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !reports_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(std::max(0, wait_ms)));
  std::vector<ReportRecord> out(std::make_move_iterator(reports_.begin()),
                                std::make_move_iterator(reports_.end()));
  reports_.clear();
  return out;
}

RunOutcome TrainWorker::Run(RunArgs args) {
  absl::StatusOr<TrainFunction> fn = FindTrainFunction(init_.function_name);
  if (!fn.ok()) return Failed("raio::train", std::string(fn.status().message()));
  at::set_num_threads(std::max(1, init_.num_threads));

  TrainContext::Info info;
  info.world_rank = init_.world_rank;
  info.world_size = init_.world_size;
  info.local_rank = args.local_rank;
  info.local_world_size = args.local_world_size;
  info.node_rank = args.node_rank;
  info.dataset_shards = std::move(args.dataset_shards);
  info.attempt = init_.attempt;
  info.experiment_name = init_.experiment_name;
  info.run_path = init_.run_path;
  info.config = nlohmann::json::parse(init_.config_json, nullptr, /*allow_exceptions=*/false);
  if (!init_.checkpoint_path.empty()) {
    absl::StatusOr<Checkpoint> checkpoint = ReadCheckpoint(init_.checkpoint_path);
    if (!checkpoint.ok()) {
      return Failed("raio::train", absl::StrCat("cannot read the checkpoint to resume from: ",
                                                checkpoint.status().message()));
    }
    info.checkpoint = *std::move(checkpoint);
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  try {
    c10::intrusive_ptr<c10d::Store> store;
    if (init_.world_rank == 0) {
      if (rendezvous_ == nullptr) return Failed("raio::train", "Run before Setup on rank 0");
      store = rendezvous_->server;
    } else {
      c10d::TCPStoreOptions options;
      options.port = static_cast<uint16_t>(args.store_port);
      options.isServer = false;
      options.waitWorkers = false;
      options.timeout = kRendezvousTimeout;
      store = c10::make_intrusive<c10d::TCPStore>(args.store_host, options);
    }
    // One prefix per attempt: keys of an earlier group never meet this one's.
    auto prefixed =
        c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("raio_train/", init_.attempt), store);
    auto options = c10d::ProcessGroupGloo::Options::create(
        std::chrono::milliseconds(init_.collective_timeout_ms));
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(NodeIp()));
    group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, init_.world_rank,
                                                        init_.world_size, options);
  } catch (const std::exception& e) {
    return Failed(raio::internal::DemangledTypeName(typeid(e)),
                  absl::StrCat("joining the process group (store ", args.store_host, ":",
                               args.store_port, "): ", e.what()));
  }
  // The context's shared_ptr keeps the intrusive_ptr's reference until the function is done.
  std::shared_ptr<c10d::ProcessGroup> shared(group.get(), [keep = group](c10d::ProcessGroup*) {});
  TrainContext ctx(std::move(info), std::move(shared),
                   [this](const Metrics& metrics, const std::optional<std::string>& dir) {
                     Report(metrics, dir);
                   });
  try {
    (*fn)(ctx);
  } catch (const std::exception& e) {
    return Failed(raio::internal::DemangledTypeName(typeid(e)), e.what());
  } catch (...) {
    return Failed("unknown exception", "a non-std::exception was thrown");
  }
  return RunOutcome{};
}

}  // namespace raio::train::internal

RAIO_REMOTE(raio::train::internal::TrainWorker::Create, &raio::train::internal::TrainWorker::Setup,
            &raio::train::internal::TrainWorker::Run, &raio::train::internal::TrainWorker::Poll);
