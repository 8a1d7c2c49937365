#include "raio/node/node_manager.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/common/process.h"
#include "raio/head.pb.h"
#include "raio/rpc.pb.h"

namespace raio::node {

using ConnPtr = std::shared_ptr<rpc::Connection>;

absl::StatusOr<std::unique_ptr<NodeManager>> NodeManager::Create(Options options) {
  auto node = std::unique_ptr<NodeManager>(new NodeManager(std::move(options)));
  absl::Status s = node->Start();
  if (!s.ok()) {
    node->Stop();
    return s;
  }
  return node;
}

namespace {
// The id a node registers as: `hex` when it is a well-formed NodeId, else a random one
// (Start refuses a malformed one).
NodeId NodeIdFrom(const std::string& hex) {
  NodeId id = RandomId<NodeId>();
  if (hex.size() != 2 * NodeId::kSize) return id;
  std::string bytes = absl::HexStringToBytes(hex);
  if (absl::BytesToHexString(bytes) != absl::AsciiStrToLower(hex)) return id;
  return NodeId::FromBinary(bytes);
}
}  // namespace

NodeManager::NodeManager(Options options)
    : options_(std::move(options)),
      id_(NodeIdFrom(options_.node_id)),
      socket_path_(options_.session_dir + "/node.sock"),
      resources_(options_.total),
      bundles_(resources_, id_.Hex()),
      // GPU ids index the devices the node itself may see: when it was started with
      // CUDA_VISIBLE_DEVICES, id i is the i-th entry of that list.
      pool_(loop_.io(),
            WorkerPool::Options{options_.session_dir, socket_path_, resources_.num_gpus() > 0,
                                ParseDeviceMask(std::getenv("CUDA_VISIBLE_DEVICES")),
                                options_.node_ip}),
      actors_(resources_, pool_, id_.Hex()),
      view_(id_.Hex()),
      scheduler_(view_, 0.5, 0.2,
                 id_.Binary().empty() ? 0 : std::hash<std::string>()(id_.Binary())),
      packages_(options_.session_dir + "/packages") {}

NodeManager::~NodeManager() { Stop(); }

absl::Status NodeManager::Start() {
  if (!options_.node_id.empty() && id_.Hex() != absl::AsciiStrToLower(options_.node_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node id '", options_.node_id, "' is not ", 2 * NodeId::kSize, " hex digits"));
  }
  if (options_.labels.count("") > 0) {
    return absl::InvalidArgumentError("node labels: a label has an empty key");
  }
  if (options_.memory_monitor) {
    if (absl::Status s = options_.memory_monitor->Validate(); !s.ok()) return s;
  }
  // GPU ids index the devices this node may see: with CUDA_VISIBLE_DEVICES set, no more
  // GPUs than it lists ("" lists none), or tasks would see devices it hides.
  if (const char* mask = std::getenv("CUDA_VISIBLE_DEVICES"); mask != nullptr) {
    std::size_t listed = ParseDeviceMask(mask).size();
    if (static_cast<std::size_t>(resources_.num_gpus()) > listed) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the node offers ", resources_.num_gpus(), " GPUs but CUDA_VISIBLE_DEVICES=\"", mask,
          "\" lists ", listed, "; offer at most ", listed,
          " (num_gpus / --num-gpus) or unset CUDA_VISIBLE_DEVICES"));
    }
  }
  auto store =
      ObjectStoreService::Create(options_.object_store_bytes, options_.session_dir + "/spill",
                                 config::object_store_prefault_bytes());
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  store_->set_node_id(id_.Hex());
  ObjectManager::Options om;
  // Always TCP: the sources are other nodes (never this one's Unix socket).
  om.connection_factory = rpc::MakeSocketConnectionFactory("", config::connect_timeout_ms());
  object_manager_ = std::make_unique<ObjectManager>(loop_.io(), *store_, std::move(om));
  RegisterHandlers();
  // Every local driver and worker receives the store's memory on connecting: it has no
  // name to open (see ShmRegion).
  auto listener = rpc::Listener::ListenUnix(
      loop_.io(), socket_path_, [this](ConnPtr c) { OnAccept(std::move(c)); }, store_->shm_fd());
  if (!listener.ok()) return listener.status();
  listener_ = std::move(*listener);
  // Owners and nodes on other hosts: spilled lease requests, failure causes, transfers.
  auto tcp = rpc::Listener::ListenTcp(loop_.io(), options_.node_ip, options_.port,
                                      [this](ConnPtr c) { OnAccept(std::move(c)); });
  if (!tcp.ok()) {
    return absl::Status(tcp.status().code(),
                        absl::StrCat("the node cannot listen on ", options_.node_ip, ":",
                                     options_.port, ": ", tcp.status().message()));
  }
  tcp_listener_ = std::move(*tcp);
  auto head = rpc::ConnectTcp(loop_.io(), options_.head_address, config::connect_timeout_ms());
  if (!head.ok()) return head.status();
  head_ = std::move(*head);
  loop_.Start();
  // The head asks this node for stats over the same connection.
  head_->Start(
      [this](const ConnPtr& c, const rpc::FrameHeader& h, std::string_view body) {
        OnRequest(c, h, body);
      },
      [this](const ConnPtr&, const absl::Status& reason) {
        if (stopped_) return;
        RAIO_LOG_WARN("lost the head connection: {}", reason.message());
        LoseCluster(absl::StrCat("its connection to the head closed (", reason.message(), ")"));
      });
  proto::RegisterNodeRequest reg;
  reg.set_node_id(id_.Hex());
  *reg.mutable_address() = address();
  reg.set_hostname(Hostname());
  options_.total.ToProto(reg.mutable_total());
  reg.mutable_labels()->insert(options_.labels.begin(), options_.labels.end());
  auto reply = rpc::CallSync<proto::REGISTER_NODE>(*head_, reg);
  if (!reply.ok()) return reply.status();
  // The cluster's configuration, before this node starts any worker (each gets this
  // process's values in its environment). A head of the same build sends only names and
  // values this node knows.
  std::map<std::string, std::string> cluster_config(reply->system_config().begin(),
                                                    reply->system_config().end());
  if (absl::Status s = config::ApplyOverrides(cluster_config, "the head's configuration");
      !s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this node cannot take the cluster's configuration (a head of another raio "
                     "version?): ",
                     s.message()));
  }
  memory_monitor_ = options_.memory_monitor.value_or(MemoryMonitorOptions::FromConfig());
  if (absl::Status s = memory_monitor_.Validate(); !s.ok()) return s;
  loop_.Post([this, view = std::move(*reply->mutable_view())] {
    view_.SetLocal(LocalView());
    view_.Apply(view);
    scheduler_.SetPolicy(config::scheduler_spread_threshold(), config::scheduler_top_k_fraction());
    reported_available_ = resources_.available();
    reported_total_ = resources_.total();
    ArmReportTimer();
    ArmReapTimer();
    last_health_check_ = Clock::now();
    ArmHealthWatchdog();
    if (memory_monitor_.interval.count() > 0) ArmMemoryTimer();
  });
  RAIO_LOG_INFO("node {} up at {}:{} ({}) with {}", id_.Hex(), options_.node_ip, port(),
                socket_path_, options_.total.ToString());
  return absl::OkStatus();
}

void NodeManager::Stop() {
  if (stop_called_.exchange(true)) return;
  std::promise<void> done;
  auto fut = done.get_future();
  loop_.Post([this, &done] {
    stopped_ = true;
    if (reap_timer_) reap_timer_->cancel();
    if (memory_timer_) memory_timer_->cancel();
    if (report_timer_) report_timer_->cancel();
    if (health_timer_) health_timer_->cancel();
    if (object_manager_) object_manager_->Stop();
    if (listener_) listener_->Stop();
    if (tcp_listener_) tcp_listener_->Stop();
    pool_.KillAll();
    for (auto& [raw, entry] : peers_) entry.first->Close(absl::CancelledError("node stopping"));
    if (head_) head_->Close(absl::CancelledError("node stopping"));
    done.set_value();
  });
  // The loop may never have started (failed Create); then there is nothing to drain.
  if (loop_.started()) fut.wait_for(std::chrono::seconds(5));
  loop_.Stop();
  pool_.KillAll();
  peers_.clear();
  leases_.clear();
  pending_.clear();
  reap_timer_.reset();
  memory_timer_.reset();
  report_timer_.reset();
  health_timer_.reset();
  object_manager_.reset();  // stopped on the loop above (or never started)
  store_.reset();           // unmaps and closes the shared memory, removes spill files
}

void NodeManager::ArmReapTimer() {
  if (!reap_timer_) reap_timer_ = std::make_unique<Timer>(loop_.io());
  reap_timer_->expires_after(config::worker_reap_interval_ms());
  reap_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    ReapWorkers();
    if (store_) store_->ExpireWaiting();
    ArmReapTimer();
  });
}

void NodeManager::ReapWorkers() {
  std::vector<WorkerId> gone = pool_.Reap();
  // How each reaped process ended, first: an actor buried or restarted below names it.
  std::map<WorkerId, std::string> how;
  for (const auto& exit : pool_.TakeExits()) {
    std::string message = DescribeExit(exit.pid, exit.status);
    how[exit.worker] = message;
    if (failure_causes_.count(exit.worker)) continue;  // e.g. the memory monitor's
    proto::WorkerFailureCause cause;
    cause.set_kind(proto::WorkerFailureCause::CRASHED);
    cause.set_pid(exit.pid);
    if (exit.running_task) {
      cause.set_running_task_known(true);
      cause.set_running_task_id(*exit.running_task);
    }
    if (WIFSIGNALED(exit.status)) {
      cause.set_signal(WTERMSIG(exit.status));
    } else {
      cause.set_exit_code(WEXITSTATUS(exit.status));
    }
    cause.set_message(std::move(message));
    RememberFailureCause(exit.worker, std::move(cause));
  }
  for (const auto& id : gone) {
    auto it = how.find(id);
    OnWorkerGone(id, it == how.end() ? "" : it->second);
  }
  for (auto& [job, why] : pool_.TakeStartFailures(config::max_worker_start_failures())) {
    FailWorkerStarts(job, why);
  }
}

void NodeManager::FailWorkerStarts(JobId job, const std::string& cause) {
  // Named by node and host: with many nodes, "where" is half of the story.
  const std::string why = absl::StrContains(cause, id_.Hex())
                              ? cause
                              : absl::StrCat("on node ", id_.Hex(), " (", Hostname(), "): ", cause);
  RAIO_LOG_ERROR("{}", why);
  proto::RequestWorkerLeaseReply reply;
  reply.set_result(proto::RequestWorkerLeaseReply::WORKER_START_FAILED);
  reply.set_message(why);
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto lit = leases_.find(*it);
    if (lit == leases_.end() || lit->second.job != job) {
      ++it;
      continue;
    }
    lit->second.owner->Reply(lit->second.request, reply);
    ReleaseLease(lit);
    it = pending_.erase(it);
  }
  actors_.FailPendingStarts(job, why);
}

void NodeManager::OnAccept(ConnPtr conn) {
  Peer peer;
  peer.client = next_client_id_++;
  peers_[conn.get()] = {conn, peer};
  conn->Start([this](const ConnPtr& c, const rpc::FrameHeader& h,
                     std::string_view body) { OnRequest(c, h, body); },
              [this](const ConnPtr& c, const absl::Status&) { OnClose(c); });
}

void NodeManager::OnRequest(const ConnPtr& conn, const rpc::FrameHeader& h, std::string_view body) {
  if (stopped_) return;
  if (!service_.Dispatch(conn, h, body)) return service_.RejectUnknown(conn, h);
  // An actor placed, killed or restarted may change what can be scheduled.
  switch (h.method) {
    case proto::PLACE_ACTOR:
    case proto::KILL_LOCAL_ACTOR:
      ScheduleLeases();
      break;
    default:
      break;
  }
}

void NodeManager::RegisterHandlers() {
  auto peer_of = [this](const rpc::Connection& c) -> const Peer* {
    auto it = peers_.find(const_cast<rpc::Connection*>(&c));
    return it == peers_.end() ? nullptr : &it->second.second;
  };
  ActorManager::Links actor_links;
  actor_links.job_of = [peer_of](const rpc::Connection& c) {
    const Peer* p = peer_of(c);
    return p == nullptr ? JobId{0} : p->job;
  };
  actor_links.head = [this] { return head_; };
  actor_links.adopt_job = [this](JobId job, const proto::JobConfigInfo& info) {
    return AdoptJob(job, info);
  };
  actor_links.job_preparing = [this](JobId job) { return preparing_jobs_.count(job) > 0; };
  actor_links.placement_group_removed = [this](const PlacementGroupId& pg) {
    return IsRemovedGroup(pg);
  };
  actors_.RegisterHandlers(service_, std::move(actor_links));
  store_->RegisterHandlers(service_, [peer_of](const rpc::Connection& c) {
    const Peer* p = peer_of(c);
    return p == nullptr ? ClientId{0} : p->client;
  });
  service_.Handle<proto::REGISTER_DRIVER>(
      [this](const rpc::Responder<proto::REGISTER_DRIVER>& r, proto::RegisterDriverRequest& req) {
        HandleRegisterDriver(r.conn(), r.header(), req);
      });
  service_.Handle<proto::REGISTER_WORKER>(
      [this](const rpc::Responder<proto::REGISTER_WORKER>& r, proto::RegisterWorkerRequest& req) {
        HandleRegisterWorker(r.conn(), r.header(), req);
      });
  object_manager_->RegisterHandlers(service_);
  RegisterPlacementHandlers();
  service_.Handle<proto::PULL_OBJECTS>(
      [this](const rpc::Responder<proto::PULL_OBJECTS>& r, proto::PullObjectsRequest& req) {
        HandlePullObjects(r.conn(), r.header(), req);
      });
  service_.Handle<proto::REQUEST_WORKER_LEASE>(
      [this](const rpc::Responder<proto::REQUEST_WORKER_LEASE>& r,
             proto::RequestWorkerLeaseRequest& req) {
        HandleRequestLease(r.conn(), r.header(), req);
      });
  // RETURN_WORKER_LEASE and CANCEL_WORKER_LEASE: the owner is done with the lease (or
  // no longer wants the one it asked for).
  auto return_lease = [this](bool cancel) {
    return [this, cancel](const auto& r, const proto::LeaseIdRequest& req) {
      HandleReturnLease(LeaseId::FromBinary(req.lease_id()), cancel);
      r.Ok(proto::Empty());
    };
  };
  service_.Handle<proto::RETURN_WORKER_LEASE>(return_lease(/*cancel=*/false));
  service_.Handle<proto::CANCEL_WORKER_LEASE>(return_lease(/*cancel=*/true));
  service_.Handle<proto::KILL_LEASED_WORKER>(
      [this](const rpc::Responder<proto::KILL_LEASED_WORKER>& responder,
             proto::LeaseIdRequest& req) {
        const auto& conn = responder.conn();
        const auto& h = responder.header();
        auto it = leases_.find(LeaseId::FromBinary(req.lease_id()));
        // Only the lease's owner may end its worker.
        if (it != leases_.end() && it->second.granted && it->second.owner == conn) {
          OnWorkerGone(it->second.worker);
        }
        if (h.kind == rpc::FrameKind::kRequest) conn->Reply(h, proto::Empty());
      });
  service_.Handle<proto::GET_WORKER_FAILURE_CAUSE>(
      [this](const rpc::Responder<proto::GET_WORKER_FAILURE_CAUSE>& responder,
             proto::GetWorkerFailureCauseRequest& req) {
        const auto& conn = responder.conn();
        const auto& h = responder.header();
        AnswerFailureCause(conn, h, WorkerId::FromBinary(req.worker_id()),
                           config::worker_exit_polls());
      });
  // A worker's task thread blocks in Get (its CPUs are lent out) or resumes.
  auto blocked = [this](bool is_blocked) {
    return [this, is_blocked](const auto& r, const proto::NotifyBlockedRequest&) {
      HandleBlocked(r.conn(), is_blocked);
    };
  };
  service_.Handle<proto::NOTIFY_BLOCKED>(blocked(true));
  service_.Handle<proto::NOTIFY_UNBLOCKED>(blocked(false));
  // The head's pushes, on the head connection only.
  service_.Handle<proto::UPDATE_CLUSTER_VIEW>(
      [this](const rpc::Responder<proto::UPDATE_CLUSTER_VIEW>& r,
             const proto::ClusterViewUpdate& update) {
        if (r.conn() == head_) HandleClusterView(update);
      });
  service_.Handle<proto::JOB_FINISHED>(
      [this](const rpc::Responder<proto::JOB_FINISHED>& r, const proto::JobFinished& req) {
        if (r.conn() != head_ || !remote_jobs_.erase(req.job_id())) return;
        OnJobEnded(req.job_id());
      });
  service_.Handle<proto::HEALTH_CHECK>(
      [this](const rpc::Responder<proto::HEALTH_CHECK>& r, const proto::Empty&) {
        if (r.conn() != head_) {
          r.Error(absl::PermissionDeniedError("only the head checks a node's health"));
          return;
        }
        last_health_check_ = Clock::now();
        r.Ok(proto::Empty());
      });
  service_.Handle<proto::GET_NODE_STATS>(
      [this](const rpc::Responder<proto::GET_NODE_STATS>& responder, const proto::Empty&) {
        const auto& conn = responder.conn();
        const auto& h = responder.header();
        conn->Reply(h, BuildStats());
      });
}

void NodeManager::HandleRegisterDriver(const ConnPtr& conn, const rpc::FrameHeader& h,
                                       const proto::RegisterDriverRequest& req) {
  if (req.executable().empty() || ::access(req.executable().c_str(), X_OK) != 0) {
    conn->ReplyError(
        h, absl::InvalidArgumentError(absl::StrCat("driver executable '", req.executable(),
                                                   "' is not executable on this node")));
    return;
  }
  Peer& peer = peers_[conn.get()].second;
  peer.kind = Peer::Kind::kDriver;
  peer.job = req.job_id();
  peer.worker = WorkerId::FromBinary(req.worker_id());
  pool_.AddJob(req.job_id(), JobConfig{req.executable(),
                                       req.working_dir(),
                                       req.ld_library_path(),
                                       req.namespace_(),
                                       {req.env_vars().begin(), req.env_vars().end()}});
  proto::RegisterDriverReply reply;
  reply.set_node_id(id_.Hex());
  reply.set_object_store_bytes(store_->capacity_bytes());
  reply.set_socket_dir(options_.session_dir);
  *reply.mutable_node_address() = remote_address();
  conn->Reply(h, reply);
  // Prestart one worker so that the first task does not wait for a process start.
  if (!config::prestart_worker()) return;
  if (absl::Status s = pool_.StartWorker(WorkerKey{req.job_id(), {}}); !s.ok()) {
    RAIO_LOG_WARN("prestart failed: {}", s.message());
  }
}

int NodeManager::port() const { return tcp_listener_ ? tcp_listener_->port() : 0; }

proto::Address NodeManager::address() const {
  proto::Address a;
  a.set_ip(options_.node_ip);
  a.set_port(port());
  a.set_node_id(id_.Binary());
  a.set_unix_socket(socket_path_);
  return a;
}

proto::Address NodeManager::remote_address() const {
  proto::Address a = address();
  a.clear_unix_socket();
  return a;
}

void NodeManager::HandleRegisterWorker(const ConnPtr& conn, const rpc::FrameHeader& h,
                                       const proto::RegisterWorkerRequest& req) {
  WorkerId id = WorkerId::FromBinary(req.worker_id());
  // The node vouches for where its workers run: the address names this node.
  proto::Address address = req.address();
  address.set_node_id(id_.Binary());
  address.set_worker_id(id.Binary());
  auto worker = pool_.OnRegistered(id, req.pid(), conn, std::move(address));
  if (!worker.ok()) {
    conn->ReplyError(h, worker.status());
    return;
  }
  Peer& peer = peers_[conn.get()].second;
  peer.kind = Peer::Kind::kWorker;
  peer.job = (*worker)->job;
  peer.worker = id;
  proto::RegisterWorkerReply reply;
  reply.set_node_id(id_.Hex());
  reply.set_object_store_bytes(store_->capacity_bytes());
  *reply.mutable_node_address() = remote_address();
  conn->Reply(h, reply);
  ScheduleLeases();
}

NodeView NodeManager::LocalView() const {
  NodeView local;
  if (const NodeView* known = view_.Find(id_.Hex())) local = *known;
  local.node_id = id_.Hex();
  local.address = address();
  local.labels = options_.labels;
  local.total = resources_.total();
  local.available = resources_.available();
  return local;
}

std::string NodeManager::ClusterDescription() const {
  std::vector<std::string> nodes;
  for (const auto& [id, node] : view_.nodes()) {
    nodes.push_back(absl::StrCat("node ", id, " ",
                                 (id == id_.Hex() ? resources_.total() : node.total).ToString()));
  }
  if (nodes.empty()) return absl::StrCat("node ", id_.Hex(), " ", resources_.total().ToString());
  return absl::StrJoin(nodes, "; ");
}

void NodeManager::ScheduleLeases() {
  // Resources first, then a worker of the lease's job and device set (WorkerKey).
  std::map<WorkerKey, int> workers_needed;
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto lit = leases_.find(*it);
    if (lit == leases_.end()) {
      it = pending_.erase(it);
      continue;
    }
    Lease& lease = lit->second;
    if (!lease.allocation) lease.allocation = resources_.TryAllocate(lease.demand);
    if (!lease.allocation) {
      ++it;
      continue;
    }
    WorkerKey key{lease.job, lease.allocation->GpuIds()};
    WorkerProcess* worker = pool_.PopIdle(key);
    if (worker == nullptr) {
      ++workers_needed[std::move(key)];
      ++it;
      continue;
    }
    Grant(lease, *worker);
    it = pending_.erase(it);
  }
  actors_.Schedule(&workers_needed);
  // A process that cannot even be spawned (no such executable, not executable, a wrong
  // format, a missing working directory) will not start on a retry either.
  // Starts are capped (worker_startup_concurrency, as Ray's maximum_startup_concurrency):
  // fifty processes starting at once on two CPUs each take long enough to overrun
  // worker_start_timeout_ms. The rest start as earlier ones register or die.
  std::map<JobId, std::string> cannot_spawn;
  const int64_t max_starting =
      config::worker_startup_concurrency() > 0
          ? config::worker_startup_concurrency()
          : std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  int64_t starting = pool_.NumStarting();
  for (const auto& [key, needed] : workers_needed) {
    if (!pool_.HasJob(key.job) || cannot_spawn.count(key.job)) continue;
    for (int i = pool_.NumStarting(key); i < needed && starting < max_starting; ++i, ++starting) {
      if (absl::Status s = pool_.StartWorker(key); !s.ok()) {
        cannot_spawn[key.job] = std::string(s.message());
        break;
      }
    }
  }
  for (const auto& [job, why] : cannot_spawn) FailWorkerStarts(job, why);
}

void NodeManager::Grant(Lease& lease, WorkerProcess& worker) {
  lease.granted = true;
  lease.worker = worker.id;
  worker.lease = lease.id;
  proto::RequestWorkerLeaseReply reply;
  reply.set_result(proto::RequestWorkerLeaseReply::GRANTED);
  reply.set_worker_id(worker.id.Binary());
  *reply.mutable_worker_address() = worker.address;
  // An owner on another host gets the worker's TCP endpoint only.
  if (auto pit = peers_.find(lease.owner.get());
      pit == peers_.end() || pit->second.second.kind == Peer::Kind::kUnknown) {
    reply.mutable_worker_address()->clear_unix_socket();
  }
  reply.set_saturated(!resources_.available().Contains(lease.demand));
  lease.owner->Reply(lease.request, reply);
}

void NodeManager::ReleaseLease(std::map<LeaseId, Lease>::iterator it) {
  Lease& lease = it->second;
  if (lease.allocation) resources_.Release(*lease.allocation);
  leases_.erase(it);
}

void NodeManager::HandleReturnLease(const LeaseId& id, bool cancel) {
  auto it = leases_.find(id);
  if (it == leases_.end()) return;  // already returned (idempotent)
  Lease& lease = it->second;
  if (!lease.granted) {
    if (cancel) {
      proto::RequestWorkerLeaseReply reply;
      reply.set_result(proto::RequestWorkerLeaseReply::CANCELLED);
      reply.set_message("cancelled by the owner");
      lease.owner->Reply(lease.request, reply);
    }
  } else if (WorkerProcess* w = pool_.Find(lease.worker)) {
    pool_.MakeIdle(w);
  }
  ReleaseLease(it);
  ScheduleLeases();
}

void NodeManager::HandleBlocked(const ConnPtr& conn, bool blocked) {
  const Peer& peer = peers_[conn.get()].second;
  if (peer.kind != Peer::Kind::kWorker) return;
  WorkerProcess* w = pool_.Find(peer.worker);
  if (w == nullptr) return;
  auto it = leases_.find(w->lease);
  if (it == leases_.end() || !it->second.allocation) return;
  if (blocked) {
    resources_.LendCpu(*it->second.allocation);
    ScheduleLeases();
  } else {
    resources_.ReclaimCpu(*it->second.allocation);
  }
}

void NodeManager::OnWorkerGone(const WorkerId& id, const std::string& reason) {
  if (EndWorker(id, reason)) ScheduleLeases();
}

bool NodeManager::EndWorker(const WorkerId& id, const std::string& reason) {
  WorkerProcess* w = pool_.Find(id);
  if (w == nullptr) return false;
  LeaseId lease = w->lease;
  pool_.Kill(id);
  actors_.OnWorkerGone(id, reason);
  auto it = leases_.find(lease);
  if (it != leases_.end()) ReleaseLease(it);
  return true;
}

void NodeManager::OnJobEnded(JobId job) {
  RAIO_LOG_INFO("job {} ended; ending its workers", job);
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.job == job) {
      if (it->second.allocation) resources_.Release(*it->second.allocation);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  bool keep_job = false;
  std::set<WorkerId> keep = actors_.OnJobEnded(job, &keep_job);
  pool_.RemoveJob(job, keep, keep_job);
  ScheduleLeases();
}

void NodeManager::OnClose(const ConnPtr& conn) {
  auto pit = peers_.find(conn.get());
  if (pit == peers_.end()) return;
  Peer peer = pit->second.second;
  peers_.erase(pit);
  if (stopped_) return;
  if (store_) store_->OnPeerGone(peer.client, peer.worker);
  if (peer.kind == Peer::Kind::kDriver) {
    OnJobEnded(peer.job);
    return;
  }
  // Leases this peer owned: pending ones are dropped, granted ones' workers may be
  // running orphaned tasks and are ended.
  std::vector<WorkerId> orphans;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.owner == conn) {
      if (it->second.granted) orphans.push_back(it->second.worker);
      if (it->second.allocation) resources_.Release(*it->second.allocation);
      it = leases_.erase(it);
    } else {
      ++it;
    }
  }
  for (const auto& w : orphans) {
    if (WorkerProcess* p = pool_.Find(w)) p->lease = LeaseId();
    pool_.Kill(w);
  }
  if (peer.kind == Peer::Kind::kWorker)
    OnWorkerDisconnected(peer.worker, config::worker_exit_polls());
  ScheduleLeases();
}

void NodeManager::OnWorkerDisconnected(const WorkerId& id, int tries_left) {
  // Its connection closes as the process exits, just before the exit can be reaped: wait
  // for it briefly, so that its actor's death or restart cause says how it ended.
  ReapWorkers();
  WorkerProcess* w = pool_.Find(id);
  if (w == nullptr) return;  // reaped (and handled) or killed meanwhile
  if (tries_left <= 0 || w->pid <= 0) {
    OnWorkerGone(id);
    return;
  }
  auto timer = std::make_shared<Timer>(loop_.io());
  timer->expires_after(config::worker_exit_poll_interval_ms());
  timer->async_wait([this, timer, id, tries_left](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    OnWorkerDisconnected(id, tries_left - 1);
  });
}

proto::NodeStats NodeManager::BuildStats() const {
  proto::NodeStats stats;
  stats.set_node_id(id_.Hex());
  stats.set_address(absl::StrCat(options_.node_ip, ":", port()));
  stats.set_hostname(Hostname());
  stats.mutable_labels()->insert(options_.labels.begin(), options_.labels.end());
  resources_.total().ToProto(stats.mutable_total());
  auto* avail = stats.mutable_available()->mutable_amounts();
  for (const auto& [name, fixed] : resources_.total().fixed()) {
    (*avail)[name] = resources_.available().Get(name);
  }
  for (const auto& [id, w] : pool_.workers()) {
    auto* ws = stats.add_workers();
    ws->set_worker_id(id.Binary());
    ws->set_pid(w.pid);
    ws->set_job_id(w.job);
    const char* state = "idle";
    if (w.state == WorkerProcess::State::kStarting) state = "starting";
    if (w.state == WorkerProcess::State::kLeased) {
      state = w.hosts_actor ? "actor" : "leased";
      auto it = leases_.find(w.lease);
      if (it != leases_.end() && it->second.allocation && it->second.allocation->cpu_lent) {
        state = "blocked";
      }
    }
    ws->set_state(state);
  }
  if (store_) store_->FillStats(stats.mutable_object_store());
  for (const auto* queue : {&pending_, &infeasible_}) {
    for (const auto& id : *queue) {
      auto it = leases_.find(id);
      if (it == leases_.end()) continue;
      auto* p = stats.add_pending_leases();
      it->second.demand.ToProto(p->mutable_demand());
      p->set_backlog(it->second.spec.backlog());
      p->set_function_name(it->second.spec.function_name());
      p->set_job_id(it->second.job);
      p->set_infeasible(it->second.infeasible);
    }
  }
  return stats;
}

}  // namespace raio::node
