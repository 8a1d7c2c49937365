#include "raio/head/head_service.h"

#include <future>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "raio/actor.pb.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/common/resources.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/connection_pool.h"

namespace raio::head {

namespace {
// A node that does not answer in time is listed without stats rather than failing the
// whole status (the CLI waits config::control_rpc_timeout_ms()).
constexpr std::chrono::milliseconds kNodeStatsTimeout{2000};
// Dead nodes kept for `raio list nodes` (the newest).
constexpr std::size_t kMaxDeadNodes = 1000;

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Compares secrets in time independent of where they differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}
}  // namespace

absl::StatusOr<std::unique_ptr<HeadService>> HeadService::Create(Options options) {
  auto head = std::unique_ptr<HeadService>(new HeadService(std::move(options)));
  auto listener = rpc::Listener::ListenTcp(
      head->loop_.io(), head->options_.host, head->options_.port,
      [raw = head.get()](std::shared_ptr<rpc::Connection> c) { raw->OnAccept(std::move(c)); });
  if (!listener.ok()) return listener.status();
  head->listener_ = std::move(*listener);
  head->loop_.Start();
  if (head->options_.health_checks) head->loop_.Post([raw = head.get()] { raw->ArmHealthTimer(); });
  return head;
}

HeadService::HeadService(Options options) : options_(std::move(options)) {
  ActorDirectory::Options actor_options;
  actor_options.fail_infeasible = options_.fail_infeasible;
  actor_options.spread_threshold = config::scheduler_spread_threshold();
  actor_options.top_k_fraction = config::scheduler_top_k_fraction();
  actor_options.seed = std::random_device()();
  actor_options.max_rejections = config::max_spillback_hops();
  actors_ = std::make_unique<ActorDirectory>(node_links_, actor_options);
  placement_groups_ = std::make_unique<PlacementGroupManager>(placement_group_links_);
  if (!options_.package_dir.empty()) {
    packages_ = std::make_unique<PackageStore>(options_.package_dir);
  }
  RegisterHandlers();
}

void HeadService::RegisterHandlers() {
  // Only a holder of the token the head was started with may shut the cluster down.
  service_.SetAuthorizer([this](const rpc::MethodInfo& method, const rpc::Connection& conn,
                                const google::protobuf::MessageLite& request) {
    if (method.method != proto::SHUTDOWN_CLUSTER) return absl::OkStatus();
    const auto& token = static_cast<const proto::ShutdownClusterRequest&>(request).token();
    if (options_.shutdown_token.empty() || !ConstantTimeEquals(token, options_.shutdown_token)) {
      RAIO_LOG_WARN("refused a shutdown request with a wrong token from {}", conn.peer_name());
      return absl::PermissionDeniedError(
          "shutting the cluster down needs the token in the cluster record of `raio start`");
    }
    return absl::OkStatus();
  });
  service_.Handle<proto::REGISTER_NODE>(
      [this](const auto& r, proto::RegisterNodeRequest& req) { HandleRegisterNode(r, req); });
  service_.Handle<proto::REGISTER_JOB>(
      [this](const auto& r, const proto::RegisterJobRequest& req) { HandleRegisterJob(r, req); });
  service_.Handle<proto::REPORT_RESOURCES>(
      [this](const auto& r, const proto::ResourceReport& report) {
        HandleReport(*r.conn(), report);
      });
  service_.Handle<proto::LIST_NODES>([this](const auto& r, const proto::Empty&) {
    proto::NodeList list;
    for (const auto& [id, node] : nodes_) *list.add_nodes() = node.info;
    for (const proto::NodeInfo& dead : dead_nodes_) *list.add_nodes() = dead;
    r.Ok(list);
  });
  service_.Handle<proto::GET_JOB_INFO>([this](const auto& r, const proto::GetJobInfoRequest& req) {
    auto it = jobs_.find(req.job_id());
    if (it == jobs_.end()) {
      r.Error(absl::NotFoundError(absl::StrCat("no job ", req.job_id())));
      return;
    }
    proto::JobConfigInfo info = it->second.config;
    info.set_running(it->second.conn != nullptr);
    r.Ok(info);
  });
  service_.Handle<proto::GET_CLUSTER_STATUS>(
      [this](const auto& r, const proto::Empty&) { HandleGetClusterStatus(r); });
  service_.Handle<proto::LIST_CLUSTER_OBJECTS>([this](const auto& r, const proto::Empty&) {
    GatherFromNodes<proto::LIST_OBJECTS, proto::LIST_CLUSTER_OBJECTS, proto::ObjectList>(
        r, [](proto::ObjectList& l) { return l.mutable_objects(); });
  });
  RegisterActorHandlers();
  RegisterPlacementGroupHandlers();
  RegisterPackageHandlers();
  service_.Handle<proto::SHUTDOWN_CLUSTER>(
      [this](const auto& r, const proto::ShutdownClusterRequest&) {
        r.Ok(proto::Empty());
        if (options_.on_shutdown_request) options_.on_shutdown_request();
      });
}

HeadService::~HeadService() { Stop(); }

void HeadService::Stop() {
  if (stopped_.exchange(true)) return;
  std::promise<void> done;
  auto fut = done.get_future();
  loop_.Post([this, &done] {
    actors_->Stop();
    placement_groups_->Stop();
    if (broadcast_timer_) broadcast_timer_->cancel();
    if (health_timer_) health_timer_->cancel();
    if (listener_) listener_->Stop();
    for (auto& [raw, conn] : conns_) conn->Close(absl::CancelledError("head stopping"));
    done.set_value();
  });
  if (loop_.started() && fut.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    RAIO_LOG_WARN("head loop did not stop in time");
  }
  loop_.Stop();
  conns_.clear();
  nodes_.clear();
  jobs_.clear();
  broadcast_timer_.reset();
  health_timer_.reset();
}

std::string HeadService::address() const {
  return absl::StrCat(options_.host, ":", listener_ ? listener_->port() : 0);
}

int HeadService::port() const { return listener_ ? listener_->port() : 0; }

void HeadService::OnAccept(std::shared_ptr<rpc::Connection> conn) {
  conns_[conn.get()] = conn;
  conn->Start(
      [this](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
             std::string_view body) {
        if (!service_.Dispatch(c, h, body)) service_.RejectUnknown(c, h);
      },
      [this](const std::shared_ptr<rpc::Connection>& c, const absl::Status&) { OnClose(c); });
}

void HeadService::OnClose(const std::shared_ptr<rpc::Connection>& conn) {
  if (packages_) packages_->AbortUploadsOf(reinterpret_cast<uintptr_t>(conn.get()));
  // Only the connection that registered a node removes it.
  if (std::string id = NodeOf(*conn); !id.empty() && !stopped_) {
    DeclareDead(id, "its connection to the head closed");
  }
  conns_.erase(conn.get());
  for (auto& [id, job] : jobs_) {
    if (job.conn != conn) continue;
    job.info.set_state("finished");
    job.conn.reset();
    actors_->OnJobFinished(id);
    placement_groups_->OnJobFinished(id);
    ScheduleBroadcast();  // removed groups
    // Nodes that run its workers for owners elsewhere end them.
    proto::JobFinished finished;
    finished.set_job_id(id);
    for (auto& [node_id, node] : nodes_) rpc::Notify<proto::JOB_FINISHED>(*node.conn, finished);
  }
}

void HeadService::DeclareDead(const std::string& id, const std::string& cause) {
  auto it = nodes_.find(id);
  if (it == nodes_.end()) return;
  if (cluster_stopping_.load()) {
    RAIO_LOG_INFO("node {} ({}) left as the cluster stops: {}", id,
                  rpc::DescribeAddress(it->second.info.address()), cause);
  } else {
    RAIO_LOG_WARN("node {} ({}) is dead: {}", id, rpc::DescribeAddress(it->second.info.address()),
                  cause);
  }
  std::shared_ptr<rpc::Connection> conn = std::move(it->second.conn);
  proto::NodeInfo dead = std::move(it->second.info);
  nodes_.erase(it);
  const int64_t now = UnixMillis();
  dead.set_state("dead");
  dead.set_death_cause(cause);
  dead.set_death_time_ms(now);
  dead.clear_available();
  dead_nodes_.push_back(std::move(dead));
  if (dead_nodes_.size() > kMaxDeadNodes) dead_nodes_.pop_front();
  removed_nodes_.push_back(id);
  proto::NodeRemovedNotice& removal = removals_.emplace_back();
  removal.set_node_id(id);
  removal.set_cause(cause);
  removal.set_time_ms(now);
  removal.set_died(true);
  // A node that is only slow or cut off learns it was declared dead: its connection
  // closes, and it registers again under a new id (NodeManager).
  if (conn && !conn->closed()) conn->Close(absl::UnavailableError("declared dead: " + cause));
  actors_->OnNodeRemoved(id, cause);
  placement_groups_->OnNodeRemoved(id);
  ScheduleBroadcast();
}

void HeadService::ArmHealthTimer() {
  if (stopped_) return;
  if (!health_timer_) health_timer_ = std::make_unique<Timer>(loop_.io());
  health_timer_->expires_after(config::health_check_period_ms());
  health_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec || stopped_) return;
    CheckHealth();
    ArmHealthTimer();
  });
}

void HeadService::CheckHealth() {
  for (auto& [id, node] : nodes_) {
    if (node.check_in_flight || !node.conn) continue;
    node.check_in_flight = true;
    rpc::Call<proto::HEALTH_CHECK>(
        *node.conn, proto::Empty(),
        [this, id = id, conn = node.conn.get()](absl::StatusOr<proto::Empty> reply) {
          OnHealthReply(id, conn, reply.ok());
        },
        config::health_check_timeout_ms());
  }
}

void HeadService::OnHealthReply(const std::string& node_id, const rpc::Connection* conn, bool ok) {
  auto it = nodes_.find(node_id);
  // Gone meanwhile, or registered again on another connection.
  if (it == nodes_.end() || it->second.conn.get() != conn) return;
  NodeEntry& node = it->second;
  node.check_in_flight = false;
  if (ok) {
    node.failed_checks = 0;
    return;
  }
  const int threshold = config::health_check_failure_threshold();
  if (++node.failed_checks < threshold) return;
  const auto period = std::max(config::health_check_period_ms(), config::health_check_timeout_ms());
  DeclareDead(
      node_id,
      absl::StrCat("missed ", threshold, " health checks in a row (no answer for about ",
                   absl::SixDigits(threshold * static_cast<double>(period.count()) / 1000.0),
                   " s)"));
}

void HeadService::HandleReport(const rpc::Connection& conn, const proto::ResourceReport& report) {
  auto it = nodes_.find(report.node_id());
  // Only the node's own connection reports for it; reports may not go back in time.
  if (it == nodes_.end() || it->second.conn.get() != &conn ||
      report.version() <= it->second.info.resource_version()) {
    return;
  }
  if (!ResourceSet::FromProto(report.available()).ok()) return;
  if (report.total_changed()) {
    // Placement group bundles committed or given back there (renamed resources).
    if (!ResourceSet::FromProto(report.total()).ok()) return;
    *it->second.info.mutable_total() = report.total();
  }
  *it->second.info.mutable_available() = report.available();
  it->second.info.set_resource_version(report.version());
  it->second.info.set_infeasible_leases(report.infeasible_leases());
  it->second.dirty = true;
  actors_->OnNodeUpdated(it->second.info);
  placement_groups_->OnNodeUpdated(it->second.info);
  ScheduleBroadcast();
}

void HeadService::ScheduleBroadcast() {
  if (broadcast_scheduled_ || stopped_) return;
  broadcast_scheduled_ = true;
  if (!broadcast_timer_) broadcast_timer_ = std::make_unique<Timer>(loop_.io());
  broadcast_timer_->expires_after(config::resource_report_interval_ms());
  broadcast_timer_->async_wait([this](const boost::system::error_code& ec) {
    broadcast_scheduled_ = false;
    if (ec || stopped_) return;
    Broadcast();
  });
}

void HeadService::Broadcast() {
  proto::ClusterViewUpdate update;
  update.set_version(++view_version_);
  for (auto& [id, node] : nodes_) {
    if (!node.dirty) continue;
    node.dirty = false;
    *update.add_nodes() = node.info;
  }
  for (auto& id : removed_nodes_) update.add_removed_node_ids(std::move(id));
  removed_nodes_.clear();
  for (auto& removal : removals_) *update.add_removals() = std::move(removal);
  removals_.clear();
  for (std::string& pg : placement_groups_->TakeRemoved()) {
    update.add_removed_placement_groups(std::move(pg));
  }
  if (update.nodes().empty() && update.removed_node_ids().empty() &&
      update.removed_placement_groups().empty()) {
    return;
  }
  for (auto& [id, node] : nodes_) rpc::Notify<proto::UPDATE_CLUSTER_VIEW>(*node.conn, update);
}

void HeadService::HandleRegisterNode(const rpc::Responder<proto::REGISTER_NODE>& r,
                                     proto::RegisterNodeRequest& req) {
  const auto& conn = r.conn();
  if (req.node_id().empty() || req.address().ip().empty() || req.address().port() <= 0) {
    r.Error(absl::InvalidArgumentError("a node registers with its id and its TCP address"));
    return;
  }
  if (auto total = ResourceSet::FromProto(req.total()); !total.ok()) {
    r.Error(total.status());
    return;
  }
  for (const proto::NodeInfo& dead : dead_nodes_) {
    if (dead.node_id() != req.node_id()) continue;
    RAIO_LOG_WARN("refused node {} from {}: it was declared dead ({})", req.node_id(),
                  conn->peer_name(), dead.death_cause());
    r.Error(absl::FailedPreconditionError(
        absl::StrCat("node ", req.node_id(), " was declared dead (", dead.death_cause(),
                     "); a node that comes back registers under a new id")));
    return;
  }
  if (auto it = nodes_.find(req.node_id()); it != nodes_.end() && !it->second.conn->closed()) {
    RAIO_LOG_WARN("refused a second registration of live node {} from {}", req.node_id(),
                  conn->peer_name());
    r.Error(absl::AlreadyExistsError("node " + req.node_id() + " is already registered"));
    return;
  }
  // A node id whose old connection closed unnoticed: its actors went with that daemon.
  if (nodes_.count(req.node_id())) {
    actors_->OnNodeRemoved(req.node_id());
    placement_groups_->OnNodeRemoved(req.node_id());
  }
  RAIO_LOG_INFO("node {} joined, {}", req.node_id(), rpc::DescribeAddress(req.address()));
  proto::RegisterNodeReply reply;
  reply.mutable_system_config()->insert(options_.system_config.begin(),
                                        options_.system_config.end());
  reply.mutable_view()->set_version(view_version_);
  for (const auto& [id, node] : nodes_) *reply.mutable_view()->add_nodes() = node.info;
  NodeEntry entry;
  entry.info.set_node_id(req.node_id());
  *entry.info.mutable_address() = req.address();
  entry.info.set_hostname(req.hostname());
  *entry.info.mutable_labels() = req.labels();
  *entry.info.mutable_total() = req.total();
  *entry.info.mutable_available() = req.total();
  entry.info.set_state("alive");
  entry.conn = conn;
  entry.dirty = true;
  std::string id = req.node_id();
  nodes_[id] = std::move(entry);
  r.Ok(reply);
  actors_->OnNodeUpdated(nodes_[id].info);
  placement_groups_->OnNodeUpdated(nodes_[id].info);
  ScheduleBroadcast();
}

void HeadService::HandleRegisterJob(const rpc::Responder<proto::REGISTER_JOB>& r,
                                    const proto::RegisterJobRequest& req) {
  if (nodes_.empty()) {
    r.Error(absl::UnavailableError("the cluster has no live node"));
    return;
  }
  const proto::NodeInfo* chosen = ChooseDriverNode(req);
  if (chosen == nullptr) {
    r.Error(absl::NotFoundError(absl::StrCat("the cluster has no node ", req.node_id())));
    return;
  }
  // Its package must be here already, so that every node can fetch it.
  std::vector<const proto::PackageFile*> package;
  if (req.has_executable_package()) package.push_back(&req.executable_package());
  for (const proto::PackageFile& f : req.files()) package.push_back(&f);
  for (const proto::PackageFile* f : package) {
    if (!packages_ || !packages_->Has(f->sha256(), f->size_bytes())) {
      r.Error(absl::FailedPreconditionError(
          absl::StrCat("the head's package store does not hold the job's file ", f->path(), " (",
                       f->sha256(), ", ", f->size_bytes(), " bytes): upload it first")));
      return;
    }
  }
  uint32_t job_id = next_job_id_++;
  JobEntry& job = jobs_[job_id];
  job.info.set_job_id(job_id);
  job.info.set_driver_pid(req.driver_pid());
  job.info.set_executable(req.executable());
  job.info.set_state("running");
  job.conn = r.conn();
  job.config.set_job_id(job_id);
  job.config.set_executable(req.executable());
  job.config.set_working_dir(req.working_dir());
  job.config.set_ld_library_path(req.ld_library_path());
  for (const auto& [name, value] : req.env_vars()) {
    if (!absl::StartsWith(name, "RAIO_")) (*job.config.mutable_env_vars())[name] = value;
  }
  job.config.set_namespace_(req.namespace_().empty() ? absl::StrCat("job-", job_id)
                                                     : req.namespace_());
  job.config.set_driver_node_id(chosen->node_id());
  if (req.has_executable_package()) {
    *job.config.mutable_executable_package() = req.executable_package();
  }
  *job.config.mutable_files() = req.files();
  proto::RegisterJobReply reply;
  reply.set_job_id(job_id);
  reply.set_node_id(chosen->node_id());
  *reply.mutable_node_address() = chosen->address();
  reply.mutable_system_config()->insert(options_.system_config.begin(),
                                        options_.system_config.end());
  r.Ok(reply);
}

const proto::NodeInfo* HeadService::ChooseDriverNode(const proto::RegisterJobRequest& req) const {
  if (!req.node_id().empty()) {
    auto it = nodes_.find(absl::AsciiStrToLower(req.node_id()));
    return it == nodes_.end() ? nullptr : &it->second.info;
  }
  // Drivers reach their node over its Unix socket: one on the driver's host, the one
  // with the driver's IP first; else the first node.
  const proto::NodeInfo* chosen = &nodes_.begin()->second.info;
  int best = 0;
  for (const auto& [id, node] : nodes_) {
    int score = (node.info.hostname() == req.hostname() ? 1 : 0) +
                (!req.driver_ip().empty() && node.info.address().ip() == req.driver_ip() ? 2 : 0);
    if (score > best) {
      best = score;
      chosen = &node.info;
    }
  }
  return chosen;
}

std::string HeadService::NodeOf(const rpc::Connection& conn) const {
  for (const auto& [id, node] : nodes_) {
    if (node.conn.get() == &conn) return id;
  }
  return "";
}

void HeadService::RegisterPackageHandlers() {
  auto no_store = [] {
    return absl::FailedPreconditionError("this head keeps no job packages (no package directory)");
  };
  service_.Handle<proto::STAT_PACKAGE>(
      [this, no_store](const auto& r, const proto::StatPackageRequest& req) {
        if (!packages_) return r.Error(no_store());
        proto::StatPackageReply reply;
        reply.set_present(packages_->Has(req.sha256(), req.size_bytes()));
        r.Ok(reply);
      });
  service_.Handle<proto::UPLOAD_PACKAGE_CHUNK>(
      [this, no_store](const auto& r, const proto::UploadPackageChunkRequest& req) {
        if (!packages_) return r.Error(no_store());
        absl::Status s = packages_->Write(reinterpret_cast<uintptr_t>(r.conn().get()), req.sha256(),
                                          req.size_bytes(), req.offset(), req.data());
        if (!s.ok()) return r.Error(s);
        r.Ok(proto::Empty());
      });
  service_.Handle<proto::FETCH_PACKAGE_CHUNK>(
      [this, no_store](const auto& r, const proto::FetchPackageChunkRequest& req) {
        if (!packages_) return r.Error(no_store());
        proto::FetchPackageChunkReply reply;
        uint64_t size = 0;
        auto data = packages_->Read(req.sha256(), req.offset(),
                                    std::min<uint32_t>(req.max_bytes(), 64u << 20), &size);
        if (!data.ok()) return r.Error(data.status());
        reply.set_size_bytes(size);
        reply.set_data(std::move(*data));
        r.Ok(reply);
      });
}

void HeadService::RegisterActorHandlers() {
  service_.Handle<proto::CREATE_ACTOR>([this](const auto& r, const proto::CreateActorRequest& req) {
    std::string node = NodeOf(*r.conn());
    if (node.empty()) {
      r.Error(absl::FailedPreconditionError(
          "actors are created through a node: send CREATE_ACTOR to the creator's node"));
      return;
    }
    auto job = jobs_.find(req.job_id());
    if (job == jobs_.end()) {
      r.Error(
          absl::FailedPreconditionError(absl::StrCat("no job ", req.job_id(), " in the cluster")));
      return;
    }
    if (const std::string& pg = req.spec().placement_group_id(); !pg.empty()) {
      // An actor in a removed (or unknown) group would wait for its bundle forever.
      auto group = placement_groups_->Get(PlacementGroupId::FromBinary(pg));
      if (!group.ok() || group->state() == proto::PG_REMOVED) {
        r.Error(absl::NotFoundError(absl::StrCat(
            "placement group ", PlacementGroupId::FromBinary(pg).Hex(),
            group.ok() ? " was " + group->message() : std::string(" does not exist"))));
        return;
      }
    }
    proto::JobConfigInfo config = job->second.config;
    config.set_running(job->second.conn != nullptr);
    auto info = actors_->Create(req.spec(), config, node);
    if (info.ok()) {
      r.Ok(*info);
    } else {
      r.Error(info.status());
    }
  });
  service_.Handle<proto::WAIT_ACTOR>([this](const auto& r, const proto::WaitActorRequest& req) {
    actors_->Wait(ActorId::FromBinary(req.actor_id()), req.min_incarnation(),
                  [r](absl::StatusOr<proto::ActorInfo> info) {
                    if (info.ok()) {
                      r.Ok(*info);
                    } else {
                      r.Error(info.status());
                    }
                  });
  });
  service_.Handle<proto::GET_NAMED_ACTOR>(
      [this](const auto& r, const proto::GetNamedActorRequest& req) {
        auto info = actors_->GetNamed(req.namespace_(), req.name());
        if (info.ok()) {
          r.Ok(*info);
        } else {
          r.Error(info.status());
        }
      });
  service_.Handle<proto::KILL_ACTOR>([this](const auto& r, const proto::KillActorRequest& req) {
    actors_->Kill(ActorId::FromBinary(req.actor_id()), req.no_restart(), [r](absl::Status s) {
      if (s.ok()) {
        r.Ok(proto::Empty());
      } else {
        r.Error(s);
      }
    });
  });
  // Only from the node the actor was placed on (ActorDirectory::OnReport checks).
  service_.Handle<proto::REPORT_ACTOR_STATE>([this](const auto& r, const proto::ActorInfo& info) {
    std::string node = NodeOf(*r.conn());
    if (!node.empty()) actors_->OnReport(node, info);
  });
  service_.Handle<proto::LIST_CLUSTER_ACTORS>(
      [this](const auto& r, const proto::Empty&) { r.Ok(actors_->List()); });
}

void HeadService::NodeLinks::Place(
    const std::string& node_id, const proto::PlaceActorRequest& request,
    std::function<void(absl::StatusOr<proto::PlaceActorReply>)> done) {
  auto it = head_.nodes_.find(node_id);
  if (it == head_.nodes_.end()) {
    head_.loop_.Post([done = std::move(done), node_id] {
      done(absl::UnavailableError(absl::StrCat("node ", node_id, " is not in the cluster")));
    });
    return;
  }
  rpc::Call<proto::PLACE_ACTOR>(*it->second.conn, request, std::move(done));
}

void HeadService::NodeLinks::Kill(const std::string& node_id,
                                  const proto::KillActorRequest& request,
                                  std::function<void(absl::Status)> done) {
  auto it = head_.nodes_.find(node_id);
  if (it == head_.nodes_.end()) {
    head_.loop_.Post([done = std::move(done), node_id] {
      done(absl::UnavailableError(absl::StrCat("node ", node_id, " is not in the cluster")));
    });
    return;
  }
  rpc::Call<proto::KILL_LOCAL_ACTOR>(
      *it->second.conn, request,
      [done = std::move(done)](absl::StatusOr<proto::Empty> reply) { done(reply.status()); });
}

template <proto::Method Ask, proto::Method Answer, typename List, typename Field>
void HeadService::GatherFromNodes(const rpc::Responder<Answer>& reply, Field field) {
  auto merged = std::make_shared<List>();
  auto remaining = std::make_shared<int>(static_cast<int>(nodes_.size()));
  if (*remaining == 0) return reply.Ok(*merged);
  for (const auto& [id, node] : nodes_) {
    // A node that does not answer in time is left out rather than failing the whole list.
    rpc::Call<Ask>(
        *node.conn, proto::Empty(),
        [reply, merged, remaining, field](absl::StatusOr<List> list) {
          if (list.ok()) {
            for (auto& entry : *field(*list)) *field(*merged)->Add() = std::move(entry);
          }
          if (--*remaining == 0) reply.Ok(*merged);
        },
        kNodeStatsTimeout);
  }
}

void HeadService::HandleGetClusterStatus(const rpc::Responder<proto::GET_CLUSTER_STATUS>& r) {
  struct Gather {
    proto::ClusterStatus status;
    int remaining = 0;
  };
  auto gather = std::make_shared<Gather>();
  for (const auto& [id, job] : jobs_) *gather->status.add_jobs() = job.info;
  for (const proto::NodeInfo& dead : dead_nodes_) *gather->status.add_dead_nodes() = dead;
  gather->status.mutable_system_config()->insert(options_.system_config.begin(),
                                                 options_.system_config.end());
  auto finish = [r, gather] { r.Ok(gather->status); };
  gather->remaining = static_cast<int>(nodes_.size());
  if (gather->remaining == 0) return finish();
  for (const auto& [id, node] : nodes_) {
    rpc::Call<proto::GET_NODE_STATS>(
        *node.conn, proto::Empty(),
        [gather, finish, node_id = id](absl::StatusOr<proto::NodeStats> stats) {
          proto::NodeStats* out = gather->status.add_nodes();
          if (stats.ok()) {
            *out = std::move(*stats);
          } else {
            out->set_node_id(node_id);
          }
          if (--gather->remaining == 0) finish();
        },
        kNodeStatsTimeout);
  }
}

}  // namespace raio::head
