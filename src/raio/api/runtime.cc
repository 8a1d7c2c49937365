// Implementation of include/raio/raio.h and include/raio/internal/runtime.h: process-wide
// runtime state (driver or worker), Init/Shutdown, and the calls ObjectRef and
// TaskCaller make.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "raio/api/job_package.h"
#include "raio/api/local_cluster.h"
#include "raio/api/runtime_internal.h"
#include "raio/common/config.h"
#include "raio/common/event_loop.h"
#include "raio/common/logging.h"
#include "raio/common/mutex.h"
#include "raio/common/process.h"
#include "raio/common/running_task.h"
#include "raio/head.pb.h"
#include "raio/node.pb.h"
#include "raio/raio.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/connection_pool.h"
#include "raio/rpc/listener.h"
#include "raio/worker/core_worker.h"
#include "raio/worker/function_registry.h"
#include "raio/worker/task_executor.h"

namespace raio {
namespace {

// Everything a driver holds while initialized. Members are destroyed in reverse order:
// the core worker before the loop that delivers its replies.
struct DriverRuntime {
  std::unique_ptr<api::LocalCluster> cluster;  // embedded mode only
  std::unique_ptr<EventLoop> loop;
  std::shared_ptr<rpc::Connection> head;
  std::shared_ptr<rpc::Connection> node;
  std::shared_ptr<worker::CoreWorker> core;
};

std::mutex g_mu;
std::unique_ptr<DriverRuntime> g_runtime;    // guarded by g_mu
std::shared_ptr<worker::CoreWorker> g_core;  // guarded by g_mu; driver or worker

std::shared_ptr<worker::CoreWorker> Core() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_core;
}

// Whether Shutdown ended a runtime since the last Init (for a clearer error).
bool g_shut_down = false;  // guarded by g_mu

}  // namespace

// The core worker, or InvalidUsageError naming `call` and why there is none.
std::shared_ptr<worker::CoreWorker> api::CoreOrThrow(const char* call) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_core) return g_core;
  if (g_shut_down) {
    throw InvalidUsageError(absl::StrCat(
        call,
        ": raio is shut down (raio::Shutdown was called); ObjectRefs and actor handles "
        "from before it are unusable; call raio::Init() to start again"));
  }
  throw InvalidUsageError(absl::StrCat(call, ": raio is not initialized: call raio::Init() first"));
}

namespace {
using api::CoreOrThrow;

// A worker's default actor namespace: its job's (RAIO_NAMESPACE, set by the node from the
// driver's, else "job-<id>").
std::string WorkerNamespace() {
  if (const char* ns = std::getenv("RAIO_NAMESPACE"); ns && *ns) return ns;
  const char* job = std::getenv("RAIO_JOB_ID");
  return absl::StrCat("job-", job ? job : "0");
}

// A worker's job (RAIO_JOB_ID, set by the node); 0 when absent or malformed.
JobId WorkerJobId() {
  uint32_t job = 0;
  const char* text = std::getenv("RAIO_JOB_ID");
  return text != nullptr && absl::SimpleAtoi(text, &job) ? job : 0;
}

[[noreturn]] void RunWorker() {
  // The node put the cluster's configuration in this process's environment.
  absl::Status config_status = config::ResetToEnvironment();
  InitLogging(spdlog::level::warn);
  if (!config_status.ok()) {
    RAIO_LOG_ERROR("worker cannot read its configuration: {}", config_status.message());
    _exit(2);
  }
  const char* node_socket = std::getenv("RAIO_NODE_SOCKET");
  const char* worker_hex = std::getenv("RAIO_WORKER_ID");
  const char* session = std::getenv("RAIO_SESSION_DIR");
  if (!node_socket || !worker_hex || !session) {
    RAIO_LOG_ERROR(
        "RAIO_WORKER_MODE is set but RAIO_NODE_SOCKET/RAIO_WORKER_ID/"
        "RAIO_SESSION_DIR are missing");
    _exit(2);
  }
  std::string hex = worker_hex;
  WorkerId id;
  for (std::size_t i = 0; i < WorkerId::kSize && 2 * i + 1 < hex.size(); ++i) {
    id.mutable_data()[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  auto* loop = new EventLoop("raio-worker", config::loop_spin_us());  // lives until _exit
  // The node passes its object store's memory on connecting (the store has no file name).
  auto connected =
      rpc::ConnectUnixReceivingFd(loop->io(), node_socket, config::connect_timeout_ms());
  if (!connected.ok()) {
    RAIO_LOG_ERROR("worker cannot reach its node: {}", connected.status().message());
    _exit(2);
  }
  std::shared_ptr<rpc::Connection> node = connected->connection;
  auto* executor = new worker::TaskExecutor();
  // The node sends actor creations on this connection. Without its node a worker has no
  // purpose: exit as soon as the node goes away.
  node->Start([executor](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
                         std::string_view body) { executor->OnNodeRequest(c, h, body); },
              [](const std::shared_ptr<rpc::Connection>&, const absl::Status&) { _exit(0); });
  loop->Start();
  std::string socket_path = absl::StrCat(session, "/w-", hex, ".sock");
  if (absl::Status s = executor->Listen(socket_path); !s.ok()) {
    RAIO_LOG_ERROR("worker cannot listen: {}", s.message());
    _exit(2);
  }
  // Owners on other hosts push over TCP at the node's IP.
  const char* node_ip_env = std::getenv("RAIO_NODE_IP");
  std::string node_ip = node_ip_env != nullptr && *node_ip_env ? node_ip_env : "127.0.0.1";
  absl::StatusOr<int> tcp_port = executor->ListenTcp(node_ip);
  if (!tcp_port.ok()) {
    RAIO_LOG_ERROR("worker cannot listen on {}: {}", node_ip, tcp_port.status().message());
    _exit(2);
  }
  if (auto marker = RunningTaskMarker::Create(RunningTaskPath(session, hex)); marker.ok()) {
    executor->set_running_marker(std::move(*marker));
  } else {
    RAIO_LOG_WARN("{}; a crash will charge a retry to the oldest task in flight",
                  marker.status().message());
  }
  proto::RegisterWorkerRequest reg;
  reg.set_worker_id(id.Binary());
  reg.set_pid(getpid());
  // The executor's endpoint; the node adds its node id and this worker's.
  reg.mutable_address()->set_ip(node_ip);
  reg.mutable_address()->set_port(*tcp_port);
  reg.mutable_address()->set_unix_socket(socket_path);
  auto reply = rpc::CallSync(*node, proto::REGISTER_WORKER, reg, config::control_rpc_timeout_ms());
  proto::RegisterWorkerReply r;
  if (!reply.ok() || !r.ParseFromString(*reply)) {
    RAIO_LOG_ERROR("worker registration failed: {}",
                   reply.ok() ? "bad reply" : std::string(reply.status().message()));
    _exit(2);
  }
  executor->set_node_id(r.node_id());
  auto store = worker::StoreClient::Create(node, std::move(connected->fd), r.object_store_bytes());
  if (!store.ok()) {
    RAIO_LOG_ERROR("worker cannot map the object store: {}", store.status().message());
    _exit(2);
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_core = std::make_shared<worker::CoreWorker>(
        worker::CoreWorker::Options{id, /*is_driver=*/false, r.node_id(), session,
                                    WorkerNamespace(), WorkerJobId(), nullptr, node_ip,
                                    r.node_address()},
        *loop, node, std::move(*store));
    executor->set_store(&g_core->store());
    executor->set_core(g_core.get());
    // Never destroyed, like the loop and the executor: a task that calls exit() runs the
    // static destructors while the worker's loop threads still use the CoreWorker.
    new std::shared_ptr<worker::CoreWorker>(g_core);
  }
  if (absl::Status s = g_core->StartOwnerService(); !s.ok()) {
    RAIO_LOG_ERROR("worker cannot start its owner service: {}", s.message());
    _exit(2);
  }
  executor->Run();
  _exit(0);
}

// Ray's address "auto": the cluster that `raio start` recorded on this machine in
// $TMPDIR/raio/current_cluster, or on a host that only runs a node, the head that node
// joined ($TMPDIR/raio/nodes/<pid>.json). ClusterUnavailableError when there is none or
// it is not running.
std::string ResolveAutoAddress() {
  const char* base = std::getenv("TMPDIR");
  const std::string dir = absl::StrCat(base && *base ? base : "/tmp", "/raio");
  std::string file = dir + "/current_cluster";
  std::ifstream in(file);
  if (!in) {
    // A host that only runs a node (`raio start --address`): the head its live node joined.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/nodes", ec)) {
      if (entry.path().extension() != ".json") continue;
      try {
        std::ifstream node_in(entry.path());
        nlohmann::json j = nlohmann::json::parse(node_in);
        std::optional<uint64_t> ticks;
        if (j.contains("pid_start_ticks")) ticks = j["pid_start_ticks"].get<uint64_t>();
        const int64_t pid = j.value("pid", int64_t{0});
        if (pid > 0 && j.contains("address") &&
            CheckProcess(static_cast<pid_t>(pid), ticks) != ProcessLiveness::kGone) {
          return j["address"].get<std::string>();
        }
      } catch (const std::exception&) {
        continue;  // a record being written, or not one of ours
      }
    }
    throw ClusterUnavailableError(
        absl::StrCat("raio::Init: address \"auto\": no raio cluster is running on this machine (",
                     file, " does not exist); start one with `raio start --head`"));
  }
  std::string address;
  int64_t pid = 0;
  std::optional<uint64_t> start_ticks;  // absent in records of older versions
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    address = j.at("address").get<std::string>();
    pid = j.value("pid", int64_t{0});
    if (j.contains("pid_start_ticks")) start_ticks = j["pid_start_ticks"].get<uint64_t>();
  } catch (const std::exception& e) {
    throw ClusterUnavailableError(absl::StrCat("raio::Init: address \"auto\": ", file,
                                               " is not a raio cluster record: ", e.what()));
  }
  if (pid > 0 && CheckProcess(static_cast<pid_t>(pid), start_ticks) == ProcessLiveness::kGone) {
    throw ClusterUnavailableError(
        absl::StrCat("raio::Init: address \"auto\": the cluster recorded in ", file, " (", address,
                     ", pid ", pid, ") is not running; start one with `raio start --head`"));
  }
  return address;
}

// `job_files`: null for an embedded cluster (no node can join it: nothing to upload).
void JoinCluster(DriverRuntime& rt, const std::string& address, const std::string& ns,
                 std::string node_id, const std::vector<std::string>* job_files) {
  rt.loop = std::make_unique<EventLoop>("raio-driver", config::loop_spin_us());
  auto head = rpc::ConnectTcp(rt.loop->io(), address, config::connect_timeout_ms());
  if (!head.ok() && head.status().code() == absl::StatusCode::kInvalidArgument) {
    throw InvalidUsageError(absl::StrCat("raio::Init: ", head.status().message()));
  }
  if (!head.ok()) {
    throw ClusterUnavailableError(
        absl::StrCat("cannot reach a raio cluster at ", address, ": ", head.status().message(),
                     " (is it running? start one with `raio start --head`)"));
  }
  rt.head = *head;
  rt.head->Start(nullptr, nullptr);
  rt.loop->Start();
  proto::RegisterJobRequest job;
  job.set_driver_pid(getpid());
  job.set_executable(SelfExecutablePath());
  job.set_hostname(Hostname());
  if (node_id.empty()) {
    if (const char* env = std::getenv("RAIO_NODE_ID")) node_id = env;
  }
  job.set_node_id(node_id);
  job.set_driver_ip(rpc::LocalIpToward(address));
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) != nullptr) job.set_working_dir(cwd);
  if (const char* ld = std::getenv("LD_LIBRARY_PATH")) job.set_ld_library_path(ld);
  // A job of the jobs API names the variables of its runtime_env: they reach its workers
  // on every node (docs/design/jobs.md).
  if (const char* names = std::getenv("RAIO_JOB_ENV_VARS")) {
    for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipEmpty())) {
      if (absl::StartsWith(name, "RAIO_")) continue;
      if (const char* value = std::getenv(std::string(name).c_str())) {
        (*job.mutable_env_vars())[std::string(name)] = value;
      }
    }
  }
  job.set_namespace_(ns);
  if (job_files != nullptr) {
    // The executable and declared files go to the head's package store first, so that
    // nodes on other hosts can fetch them before they start this job's workers.
    auto package = api::DescribeJobPackage(job.executable(), *job_files);
    if (!package.ok())
      throw InvalidUsageError(absl::StrCat("raio::Init: ", package.status().message()));
    if (absl::Status s = api::UploadJobPackage(*rt.head, *package); !s.ok()) {
      throw ClusterUnavailableError(
          absl::StrCat("cannot upload this job's executable and files to "
                       "the head at ",
                       address, ": ", s.message()));
    }
    *job.mutable_executable_package() = (*package)[0];
    for (std::size_t i = 1; i < package->size(); ++i) *job.add_files() = (*package)[i];
  }
  auto reply = rpc::CallSync(*rt.head, proto::REGISTER_JOB, job, config::connect_timeout_ms());
  proto::RegisterJobReply jr;
  if (!reply.ok() || !jr.ParseFromString(*reply)) {
    throw ClusterUnavailableError(
        absl::StrCat("the raio cluster at ", address, " did not accept this job: ",
                     reply.ok() ? "malformed reply" : std::string(reply.status().message())));
  }
  // The cluster's configuration wins over this process's environment, so that the driver
  // agrees with the nodes and workers. (This driver's own loop was made before: its spin
  // keeps the local loop_spin_us.)
  std::map<std::string, std::string> cluster_config(jr.system_config().begin(),
                                                    jr.system_config().end());
  if (absl::Status s = config::ApplyOverrides(cluster_config, "the head's configuration");
      !s.ok()) {
    throw ClusterUnavailableError(
        absl::StrCat("this driver cannot take the configuration of the raio cluster at ", address,
                     " (a head of another raio version?): ", s.message()));
  }
  // The node passes its object store's memory on connecting (the store has no file name).
  // A driver attaches to a node on its own host (the head chose one there).
  const proto::Address& node_address = jr.node_address();
  auto node = rpc::ConnectUnixReceivingFd(rt.loop->io(), node_address.unix_socket(),
                                          config::connect_timeout_ms());
  if (!node.ok()) {
    throw ClusterUnavailableError(absl::StrCat("cannot reach the node daemon, ",
                                               rpc::DescribeAddress(node_address), ": ",
                                               node.status().message()));
  }
  rt.node = node->connection;
  std::weak_ptr<worker::CoreWorker>* weak_core = new std::weak_ptr<worker::CoreWorker>();
  // The node's notices (LEASE_INFEASIBLE) go to the core worker once it exists.
  auto notice_core = std::make_shared<std::weak_ptr<worker::CoreWorker>>();
  rt.node->Start(
      [notice_core](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
                    std::string_view body) {
        if (auto core = notice_core->lock()) core->OnNodeRequest(c, h, body);
      },
      [weak_core](const std::shared_ptr<rpc::Connection>&, const absl::Status& reason) {
        if (auto core = weak_core->lock()) core->OnNodeLost(std::string(reason.message()));
        delete weak_core;
      });
  WorkerId driver_id = RandomId<WorkerId>();
  proto::RegisterDriverRequest reg;
  reg.set_job_id(jr.job_id());
  reg.set_worker_id(driver_id.Binary());
  reg.set_namespace_(ns.empty() ? absl::StrCat("job-", jr.job_id()) : ns);
  reg.set_executable(SelfExecutablePath());
  reg.set_working_dir(job.working_dir());
  reg.set_ld_library_path(job.ld_library_path());
  *reg.mutable_env_vars() = job.env_vars();
  reg.set_pid(getpid());
  auto dreply = rpc::CallSync(*rt.node, proto::REGISTER_DRIVER, reg, config::connect_timeout_ms());
  proto::RegisterDriverReply dr;
  if (!dreply.ok() || !dr.ParseFromString(*dreply)) {
    throw ClusterUnavailableError(
        absl::StrCat("the node daemon refused this driver: ",
                     dreply.ok() ? "malformed reply" : std::string(dreply.status().message())));
  }
  auto store = worker::StoreClient::Create(rt.node, std::move(node->fd), dr.object_store_bytes());
  if (!store.ok()) {
    throw ClusterUnavailableError(
        absl::StrCat("cannot map the node's object store: ", store.status().message()));
  }
  rt.core = std::make_shared<worker::CoreWorker>(
      worker::CoreWorker::Options{
          driver_id, /*is_driver=*/true, dr.node_id(), dr.socket_dir(),
          ns.empty() ? absl::StrCat("job-", jr.job_id()) : ns, jr.job_id(), nullptr,
          node_address.ip().empty() ? "127.0.0.1" : node_address.ip(), dr.node_address()},
      *rt.loop, rt.node, std::move(*store));
  if (absl::Status s = rt.core->StartOwnerService(); !s.ok()) {
    throw ClusterUnavailableError(absl::StrCat("cannot start the owner service: ", s.message()));
  }
  *weak_core = rt.core;
  *notice_core = rt.core;
}

void TearDown(std::unique_ptr<DriverRuntime> rt) {
  if (!rt) return;
  if (rt->core) rt->core->Shutdown();
  if (rt->node) rt->node->Close(absl::CancelledError("driver shutting down"));
  if (rt->head) rt->head->Close(absl::CancelledError("driver shutting down"));
  if (rt->cluster) rt->cluster->Stop();
  if (rt->loop) rt->loop->Stop();
  rt->core.reset();
}

bool IsWorkerProcess() {
  const char* mode = std::getenv("RAIO_WORKER_MODE");
  return mode != nullptr && std::string(mode) == "1";
}

}  // namespace

void Init(const InitOptions& options, int /*argc*/, char** /*argv*/) {
  UseOptimizedMutexes();
  if (std::vector<std::string> conflicts = worker::RegistrationConflicts(); !conflicts.empty()) {
    throw InvalidUsageError(absl::StrCat("raio::Init: ", absl::StrJoin(conflicts, "; ")));
  }
  if (IsWorkerProcess()) {
    {
      std::lock_guard<std::mutex> lock(g_mu);
      if (g_core) {
        throw InvalidUsageError(
            "raio::Init called inside a remote function; call it once, at the top of main");
      }
    }
    RunWorker();
  }
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_runtime) throw InvalidUsageError("raio::Init called twice; call raio::Shutdown() first");
  // Each Init starts from the defaults and the environment as it is now (a program may set
  // RAIO_* variables in main), not from the overrides of an earlier Init.
  absl::Status config_status = config::ResetToEnvironment();
  InitLogging(spdlog::level::warn);
  if (!config_status.ok()) {
    throw InvalidUsageError(absl::StrCat("raio::Init: ", config_status.message()));
  }
  std::string address = options.address;
  if (address.empty()) {
    if (const char* env = std::getenv("RAIO_ADDRESS")) address = env;
  }
  auto rt = std::make_unique<DriverRuntime>();
  try {
    if (address == "auto") address = ResolveAutoAddress();
    if (address.empty()) {
      api::LocalClusterOptions lo;
      lo.num_cpus = options.num_cpus;
      lo.num_gpus = options.num_gpus;
      lo.memory_bytes = options.memory_bytes;
      lo.resources = options.resources;
      lo.object_store_bytes = options.object_store_memory_bytes;
      lo.memory_usage_threshold = options.memory_usage_threshold;
      lo.memory_usage_threshold_bytes = options.memory_usage_threshold_bytes;
      lo.system_config = options.system_config;
      auto cluster = api::LocalCluster::Create(lo);
      if (!cluster.ok()) {
        if (cluster.status().code() == absl::StatusCode::kInvalidArgument) {
          throw InvalidUsageError(absl::StrCat("raio::Init: ", cluster.status().message()));
        }
        throw ClusterUnavailableError(
            absl::StrCat("cannot start the embedded cluster: ", cluster.status().message()));
      }
      rt->cluster = std::move(*cluster);
      address = rt->cluster->head_address();
    } else if (options.num_cpus || options.num_gpus || options.memory_bytes ||
               options.object_store_memory_bytes || !options.resources.empty() ||
               options.memory_usage_threshold || options.memory_usage_threshold_bytes) {
      throw InvalidUsageError(
          "raio::Init: num_cpus/num_gpus/memory/resources/memory_usage_threshold apply to an "
          "embedded cluster only; pass them to `raio start` for a standalone cluster");
    } else if (!options.system_config.empty()) {
      throw InvalidUsageError(
          "raio::Init: system_config applies to an embedded cluster only: a cluster's "
          "configuration is set where it starts (`raio start --head --system-config JSON`) "
          "and a driver that joins takes it from the head");
    }
    std::vector<std::string> job_files =
        options.job_files.empty() ? api::JobFilesFromEnvironment() : options.job_files;
    JoinCluster(*rt, address, options.ns, options.node_id, rt->cluster ? nullptr : &job_files);
  } catch (...) {
    TearDown(std::move(rt));
    throw;
  }
  g_core = rt->core;
  g_runtime = std::move(rt);
  g_shut_down = false;
}

void Init(int argc, char** argv) { Init(InitOptions{}, argc, argv); }
void Init() { Init(InitOptions{}, 0, nullptr); }

void Shutdown() {
  std::unique_ptr<DriverRuntime> rt;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    // A worker process has a core but no driver runtime: its node ends it.
    if (!g_runtime && g_core) {
      throw InvalidUsageError(
          "raio::Shutdown called inside a remote function; a worker is ended by its node");
    }
    rt = std::move(g_runtime);
    if (rt) g_shut_down = true;
    g_core.reset();
  }
  TearDown(std::move(rt));
}

std::map<std::string, std::string> SystemConfig() { return config::CurrentValues(); }

std::string GetNodeId() { return CoreOrThrow("raio::GetNodeId")->node_id_hex(); }

bool IsInitialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_core != nullptr;
}

namespace internal {

ObjectId SubmitTask(const std::string& function_name, std::vector<TaskArg> args,
                    const TaskOptions& options) {
  return CoreOrThrow("raio::Task(...).Remote")->SubmitTask(function_name, std::move(args), options);
}

ObjectId PutObject(ValueFormat format, DType dtype, const void* data, std::size_t size,
                   std::vector<ObjectId> contained) {
  return CoreOrThrow("raio::Put")->Put(format, dtype, data, size, std::move(contained));
}

ValueView GetObject(const ObjectId& id, std::optional<std::chrono::microseconds> timeout) {
  if (timeout && timeout->count() < 0) {
    throw InvalidUsageError(
        absl::StrCat("ObjectRef::Get: the timeout must be >= 0, got ", timeout->count(), " us"));
  }
  return CoreOrThrow("ObjectRef::Get")->Get(id, timeout);
}

std::vector<bool> WaitObjects(const std::vector<ObjectId>& ids, int num_objects,
                              std::optional<std::chrono::microseconds> timeout) {
  return CoreOrThrow("raio::Wait")->Wait(ids, num_objects, timeout);
}

void CancelTask(const ObjectId& id, bool force) { CoreOrThrow("raio::Cancel")->Cancel(id, force); }

NodeResourceStats GetNodeResourceStats() {
  proto::NodeStats stats = CoreOrThrow("raio::internal::GetNodeResourceStats")->GetNodeStats();
  NodeResourceStats out;
  out.total.insert(stats.total().amounts().begin(), stats.total().amounts().end());
  out.available.insert(stats.available().amounts().begin(), stats.available().amounts().end());
  return out;
}

ObjectStats GetObjectStats() {
  auto core = CoreOrThrow("raio::internal::GetObjectStats");
  ObjectStats out;
  out.owned_objects = core->NumOwnedObjects();
  proto::NodeStats stats = core->GetNodeStats();
  out.store_objects = stats.object_store().num_objects();
  out.store_used_bytes = stats.object_store().used_bytes();
  out.store_spilled_objects = stats.object_store().num_spilled();
  out.store_capacity_bytes = stats.object_store().capacity_bytes();
  return out;
}

ActorId CreateActor(const std::string& factory_name, const std::string& class_name,
                    std::vector<TaskArg> args, const ActorOptions& options) {
  return CoreOrThrow("raio::Actor(...).Remote")
      ->CreateActor(factory_name, class_name, std::move(args), options);
}

ObjectId SubmitActorTask(const ActorId& actor, const std::string& method_name,
                         std::vector<TaskArg> args, int num_returns) {
  return CoreOrThrow("ActorHandle::Task(...).Remote")
      ->SubmitActorTask(actor, method_name, std::move(args), num_returns);
}

namespace {
thread_local uint32_t tls_encoding_return = 0;
}  // namespace

void SetEncodingReturn(uint32_t index) { tls_encoding_return = index; }
uint32_t EncodingReturn() { return tls_encoding_return; }

void KillActor(const ActorId& actor, bool no_restart) {
  CoreOrThrow("ActorHandle::Kill")->KillActor(actor, no_restart);
}

std::optional<ActorId> GetNamedActor(const std::string& name, const std::string& ns,
                                     const std::string& class_name) {
  return CoreOrThrow("raio::GetActor")->GetNamedActor(name, ns, class_name);
}

OwnerInfo OnObjectRefSerialized(const ObjectId& id) {
  return CoreOrThrow("serializing an ObjectRef")->SerializeRef(id);
}

void OnObjectRefDeserialized(const ObjectId& id, const OwnerInfo& owner) {
  CoreOrThrow("deserializing an ObjectRef")->DeserializeRef(id, owner);
}

void AddLocalReference(const ObjectId& id) {
  if (auto core = Core()) core->AddLocalReference(id);
}

void RemoveLocalReference(const ObjectId& id) {
  if (auto core = Core()) core->RemoveLocalReference(id);
}

}  // namespace internal
}  // namespace raio
