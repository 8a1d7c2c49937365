#include "raio/worker/core_worker.h"

#include <sched.h>

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/labels.h"
#include "raio/common/logging.h"
#include "raio/common/placement_resources.h"
#include "raio/common/resources.h"
#include "raio/errors.h"
#include "raio/internal/returns.h"
#include "raio/node.pb.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/listener.h"

namespace raio::worker {

namespace {
thread_local bool tls_executing_task = false;
thread_local std::string tls_capturing_pg;
}  // namespace

void CoreWorker::SetExecutingTask(bool executing) { tls_executing_task = executing; }
void CoreWorker::SetCapturingPlacementGroup(std::string pg_hex) {
  tls_capturing_pg = std::move(pg_hex);
}
const std::string& CoreWorker::CapturingPlacementGroup() { return tls_capturing_pg; }

absl::StatusOr<std::string> CoreWorker::CallNode(proto::Method method,
                                                 const google::protobuf::MessageLite& request,
                                                 std::optional<std::chrono::milliseconds> timeout) {
  return rpc::CallSync(*node_, method, request, timeout);
}

namespace {
std::shared_ptr<rpc::ConnectionFactory> FactoryFor(const CoreWorker::Options& options) {
  if (options.connection_factory) return options.connection_factory;
  return rpc::MakeSocketConnectionFactory(absl::HexStringToBytes(options.node_id_hex),
                                          config::connect_timeout_ms());
}
}  // namespace

CoreWorker::CoreWorker(Options options, EventLoop& loop, std::shared_ptr<rpc::Connection> node,
                       std::unique_ptr<StoreClient> store)
    : options_(std::move(options)),
      loop_(loop),
      node_(node),
      store_(std::move(store)),
      pool_(loop.io(), FactoryFor(options_)),
      objects_(
          ObjectTable::Callbacks{[this](const ObjectId& id, ObjectEntry& e)
                                     ABSL_NO_THREAD_SAFETY_ANALYSIS { OnObjectFreed(id, e); },
                                 [this](const ObjectId& id, ObjectEntry& e)
                                     ABSL_NO_THREAD_SAFETY_ANALYSIS { OnObjectReady(id, e); }}),
      resolver_(objects_),
      submitter_(mu_, outbox_, pool_, ready_cv_, completions_, objects_, resolver_, loop, node,
                 options_.node_id_hex, options_.worker_id),
      actor_submitter_(mu_, outbox_, pool_, loop, node, submitter_, objects_, resolver_) {
  RegisterOwnerServiceHandlers();
  submitter_.SetJob(options_.job_id);
  node_notices_.Handle<proto::LEASE_INFEASIBLE>(
      [this](const rpc::Responder<proto::LEASE_INFEASIBLE>&,
             const proto::LeaseInfeasibleNotice& notice) { OnLeaseInfeasible(notice); });
  node_notices_.Handle<proto::NODE_REMOVED>(
      [this](const rpc::Responder<proto::NODE_REMOVED>&, const proto::NodeRemovedNotice& notice) {
        OnNodeRemoved(notice);
      });
  pool_.OnClose([this](const std::shared_ptr<rpc::Connection>& conn, const absl::Status&) {
    OnPooledConnectionClosed(conn);
  });
}

CoreWorker::~CoreWorker() { Shutdown(); }

template <typename Spec>
void CoreWorker::SetStrategy(const std::string& function_name, const SchedulingStrategy& strategy,
                             const std::map<std::string, std::string>& label_selector, Spec* spec) {
  if (absl::Status s = ValidateLabelSelector(label_selector); !s.ok()) {
    throw InvalidUsageError(absl::StrCat(function_name, ": SetLabelSelector: ", s.message()));
  }
  spec->mutable_label_selector()->insert(label_selector.begin(), label_selector.end());
  switch (strategy.kind()) {
    case SchedulingStrategy::Kind::kDefault:
      return;
    case SchedulingStrategy::Kind::kSpread:
      spec->mutable_scheduling_strategy()->set_kind(proto::SchedulingStrategy::SPREAD);
      return;
    case SchedulingStrategy::Kind::kNodeAffinity: {
      const std::string& hex = strategy.node_id();
      std::string bytes = absl::HexStringToBytes(hex);
      if (hex.size() != 2 * NodeId::kSize ||
          absl::BytesToHexString(bytes) != absl::AsciiStrToLower(hex)) {
        throw InvalidUsageError(absl::StrCat(
            function_name, ": SchedulingStrategy::NodeAffinity: '", hex, "' is not a node id (",
            2 * NodeId::kSize, " hex digits, as raio::GetNodeId() and `raio list nodes` show)"));
      }
      auto* s = spec->mutable_scheduling_strategy();
      s->set_kind(proto::SchedulingStrategy::NODE_AFFINITY);
      s->set_node_id(bytes);
      s->set_soft(strategy.soft());
      return;
    }
  }
}

template <typename CallOptions, typename Spec>
bool CoreWorker::SetPlacementGroup(const std::string& function_name, const CallOptions& options,
                                   ResourceSet* demand, Spec* spec) {
  std::string pg_hex = options.placement_group_id;
  int bundle_index = options.placement_bundle_index;
  const bool other_placement = options.strategy.kind() != SchedulingStrategy::Kind::kDefault ||
                               !options.label_selector.empty();
  if (!pg_hex.empty() && other_placement) {
    throw InvalidUsageError(absl::StrCat(
        function_name, ": SetPlacementGroup cannot be combined with SetSchedulingStrategy ",
        "(SPREAD, NodeAffinity) or SetLabelSelector: the bundle decides the node"));
  }
  if (pg_hex.empty() && !other_placement && !CapturingPlacementGroup().empty()) {
    pg_hex = CapturingPlacementGroup();  // the parent captures its children
    bundle_index = -1;
  }
  if (pg_hex.empty()) return false;
  std::optional<PlacementGroupId> pg = PlacementGroupIdFromHex(pg_hex);
  if (!pg) {
    throw InvalidUsageError(absl::StrCat(function_name, ": SetPlacementGroup: '", pg_hex,
                                         "' is not a placement group id"));
  }
  if (!options.placement_bundles.empty()) {
    std::string why =
        DemandFitsBundles(*demand, options.placement_bundles, std::max(bundle_index, 0), pg_hex);
    if (!why.empty()) throw InvalidUsageError(absl::StrCat(function_name, ": ", why));
  }
  *demand = PlacementDemand(*demand, *pg, bundle_index);
  spec->set_placement_group_id(pg->Binary());
  spec->set_placement_bundle_index(bundle_index);
  return true;
}
template bool CoreWorker::SetPlacementGroup(const std::string&, const internal::TaskOptions&,
                                            ResourceSet*, proto::TaskSpec*);
template bool CoreWorker::SetPlacementGroup(const std::string&, const internal::ActorOptions&,
                                            ResourceSet*, proto::ActorSpec*);

template void CoreWorker::SetStrategy(const std::string&, const SchedulingStrategy&,
                                      const std::map<std::string, std::string>&, proto::TaskSpec*);
template void CoreWorker::SetStrategy(const std::string&, const SchedulingStrategy&,
                                      const std::map<std::string, std::string>&, proto::ActorSpec*);

void CoreWorker::OnLeaseInfeasible(const proto::LeaseInfeasibleNotice& notice) {
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  submitter_.AssertHeld();
  submitter_.OnLeaseInfeasible(notice);
}

void CoreWorker::OnNodeRemoved(const proto::NodeRemovedNotice& notice) {
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  if (notice.node_id() == options_.node_id_hex) {
    // This process's own node lost the cluster; its connection closes next.
    node_lost_cause_ = notice.cause();
    submitter_.AssertHeld();
    submitter_.OnOwnNodeLost(notice.cause());
    return;
  }
  submitter_.AssertHeld();
  submitter_.OnNodeRemoved(notice);
  actor_submitter_.AssertHeld();
  actor_submitter_.OnNodeRemoved(notice.node_id());
}

void CoreWorker::OnNodeRequest(const std::shared_ptr<rpc::Connection>& conn,
                               const rpc::FrameHeader& h, std::string_view body) {
  if (!node_notices_.Dispatch(conn, h, body)) node_notices_.RejectUnknown(conn, h);
}

void CoreWorker::Shutdown() {
  // Copies of this process's objects on other nodes: nothing else frees them once it is
  // gone (its own node deletes what a dead owner left there; other nodes never knew it).
  // A secondary copy on this node goes too: the node deletes a dead owner's primaries, not
  // the copies it pulled for it. (On one node there are none: nothing extra to send.)
  std::map<std::string, std::pair<proto::Address, std::vector<ObjectId>>> remote_copies;
  std::vector<ObjectId> local_copies;
  {
    OutboxLock lock(&mu_, &outbox_);
    if (shut_down_) return;
    shut_down_ = true;
    objects_.ForEach([&](const ObjectId& id, ObjectEntry& e) {
      if (e.borrowed) return;
      for (std::size_t i = 0; i < e.locations.size(); ++i) {
        const proto::Address& a = e.locations[i];
        if (a.node_id() == options_.node_address.node_id()) {
          if (i > 0) local_copies.push_back(id);  // a secondary copy pulled here
          continue;
        }
        auto& [address, ids] = remote_copies[a.node_id()];
        address = a;
        ids.push_back(id);
      }
    });
    submitter_.AssertHeld();
    submitter_.Shutdown();
    actor_submitter_.AssertHeld();
    actor_submitter_.Shutdown();
    borrower_watches_.clear();
    ready_cv_.SignalAll();
  }
  if (store_) {
    for (const ObjectId& id : local_copies) store_->Delete(id);
  }
  for (const auto& [node, copies] : remote_copies) {
    auto conn = pool_.Get(copies.first);
    if (!conn.ok()) continue;  // that node is gone, and its store with it
    proto::ObjectIdRequest req;
    for (const ObjectId& id : copies.second) {
      req.set_object_id(id.Binary());
      (*conn)->SendOneWay(proto::DELETE_OBJECT, req);
    }
  }
  // Their close callbacks take mu_.
  pool_.CloseAll(absl::CancelledError("shutting down"));
}

void CoreWorker::OnNodeLost(const std::string& why) {
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return;
  // The node said why before it closed (it lost the cluster), or it just went away.
  node_lost_ = !node_lost_cause_.empty() ? node_lost_cause_ : "the node daemon is gone: " + why;
  submitter_.AssertHeld();
  submitter_.FailAll(node_lost_);
  ready_cv_.SignalAll();
}

std::vector<RefArg> CoreWorker::SplitArgs(std::vector<internal::TaskArg>& args,
                                          google::protobuf::RepeatedPtrField<proto::TaskArg>* out) {
  std::vector<RefArg> ref_args;
  for (std::size_t i = 0; i < args.size(); ++i) {
    proto::TaskArg* a = out->Add();
    if (args[i].kind == internal::TaskArg::Kind::kValue) {
      a->set_value(std::move(args[i].value.bytes));
      a->set_format(static_cast<uint32_t>(args[i].value.format));
      a->set_dtype(static_cast<uint32_t>(args[i].value.dtype));
    } else {
      ref_args.push_back(RefArg{static_cast<int>(i), std::move(args[i].refs),
                                args[i].kind == internal::TaskArg::Kind::kObjectRefList});
    }
  }
  return ref_args;
}

void CoreWorker::FetchBorrowedArgsLocked(const std::vector<RefArg>& ref_args) {
  // Borrowed ObjectRef arguments: ask their owners for the values.
  for (const RefArg& arg : ref_args) {
    for (const auto& ref : arg.ids) {
      ObjectEntry* e = objects_.Find(ref);
      if (e != nullptr && e->borrowed && !e->ready) FetchBorrowedLocked(ref, *e);
    }
  }
}

ObjectId CoreWorker::SubmitTask(const std::string& function_name,
                                std::vector<internal::TaskArg> args,
                                const internal::TaskOptions& options) {
  auto demand = ResourceSet::FromMap(options.resources);
  if (!demand.ok()) {
    throw InvalidUsageError(
        absl::StrCat("invalid resources for ", function_name, ": ", demand.status().message()));
  }
  if (options.num_returns < 1) {
    throw InvalidUsageError(absl::StrCat("num_returns of ", function_name, " must be >= 1"));
  }
  if (options.max_retries < -1) {
    throw InvalidUsageError(absl::StrCat("SetMaxRetries(", options.max_retries,
                                         "): the count must be >= 0, or -1 for unlimited"));
  }
  // Large by-value arguments go to the store first and travel by reference; the task's
  // argument reference keeps them alive, so the Put's own reference is dropped below.
  std::vector<ObjectId> auto_put;
  for (std::size_t i = 0; i < args.size(); ++i) {
    internal::TaskArg& arg = args[i];
    if (arg.kind == internal::TaskArg::Kind::kValue &&
        arg.value.bytes.size() >= config::max_inline_object_bytes()) {
      ObjectId id;
      try {
        id = Put(arg.value.format, arg.value.dtype, arg.value.bytes.data(), arg.value.bytes.size());
      } catch (const ObjectStoreFullError& e) {
        for (const auto& put : auto_put) RemoveLocalReference(put);
        throw ObjectStoreFullError(
            absl::StrCat("argument ", i + 1, " of ", function_name, ": ", e.what()));
      }
      arg.kind = internal::TaskArg::Kind::kObjectRef;
      arg.refs = {id};
      arg.value = {};
      auto_put.push_back(id);
    }
  }
  auto task = std::make_shared<TaskEntry>();
  proto::TaskSpec* spec = task->request.mutable_spec();
  spec->set_function_name(function_name);
  spec->set_owner_worker_id(options_.worker_id.Binary());
  spec->set_name(options.name);
  spec->set_job_id(options_.job_id);
  // The default demand ({CPU: 1}) travels as an empty set: most tasks use it, and a proto
  // map costs allocations on both sides of every task.
  const bool default_demand = options.resources.size() == 1 &&
                              options.resources.begin()->first == "CPU" &&
                              options.resources.begin()->second == 1.0;
  const bool in_group = SetPlacementGroup(function_name, options, &*demand, spec);
  if (in_group) {
    spec->set_placement_group_capture_child_tasks(options.placement_group_capture_child_tasks);
  }
  if (!default_demand || in_group) demand->ToProto(spec->mutable_resources());
  if (options.num_returns > 1) spec->set_num_returns(static_cast<uint32_t>(options.num_returns));
  SetStrategy(function_name, options.strategy, options.label_selector, spec);
  task->num_returns = options.num_returns;
  task->retries_left = options.max_retries;
  std::vector<ObjectId> contained;
  for (auto& arg : args) {
    contained.insert(contained.end(), arg.contained.begin(), arg.contained.end());
  }
  std::vector<RefArg> ref_args = SplitArgs(args, spec->mutable_args());
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) throw InvalidUsageError("raio is shut down");
  if (!node_lost_.empty()) throw ClusterUnavailableError(node_lost_);
  TaskId task_id = MakeTaskId(options_.worker_id, next_task_seq_++);
  spec->set_task_id(task_id.Binary());  // caller_address: added to each push (TaskSubmitter)
  task->task_id = task_id;
  task->return_id = MakeObjectId(task_id, 1);
  ObjectId id = task->return_id;
  for (int i = 0; i < options.num_returns; ++i) {
    objects_.Create(internal::NthReturnId(id, static_cast<uint32_t>(i)), /*local_refs=*/1);
  }
  for (const auto& c : contained) objects_.AddTaskArgRef(c);
  task->held_refs = std::move(contained);
  FetchBorrowedArgsLocked(ref_args);
  submitter_.AssertHeld();
  submitter_.Submit(std::move(task), *demand, std::move(ref_args));
  for (const auto& put : auto_put) objects_.RemoveLocalRef(put);
  return id;
}

ObjectId CoreWorker::Put(internal::ValueFormat format, internal::DType dtype, const void* data,
                         std::size_t size, std::vector<ObjectId> contained) {
  ObjectId id;
  {
    OutboxLock lock(&mu_, &outbox_);
    if (shut_down_) throw InvalidUsageError("raio is shut down");
    id = MakeObjectId(MakeTaskId(options_.worker_id, next_task_seq_++), 0x80000000u);
  }
  if (size >= config::max_inline_object_bytes()) {
    absl::Status s = store_->Put(id, options_.worker_id, format, dtype, data, size);
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      throw ObjectStoreFullError(std::string(s.message()));
    }
    if (!s.ok()) throw ClusterUnavailableError(absl::StrCat("Put failed: ", s.message()));
    OutboxLock lock(&mu_, &outbox_);
    objects_.Create(id, /*local_refs=*/1);
    objects_.SetInStore(id);
    if (options_.node_address.port() > 0) AddLocation(*objects_.Find(id), options_.node_address);
    for (const auto& c : contained) objects_.AddLocalRef(c);
    objects_.SetContained(id, std::move(contained));
    return id;
  }
  auto bytes = std::make_shared<const std::string>(static_cast<const char*>(data), size);
  OutboxLock lock(&mu_, &outbox_);
  objects_.Create(id, /*local_refs=*/1);
  objects_.SetValue(id, internal::ValueView{format, dtype, *bytes, bytes});
  for (const auto& c : contained) objects_.AddLocalRef(c);
  objects_.SetContained(id, std::move(contained));
  return id;
}

void CoreWorker::NotifyBlocked(bool blocked) {
  auto req = std::make_shared<proto::NotifyBlockedRequest>();
  req->set_worker_id(options_.worker_id.Binary());
  outbox_.Send(node_, blocked ? proto::NOTIFY_BLOCKED : proto::NOTIFY_UNBLOCKED, std::move(req));
}

bool CoreWorker::WaitForCompletionLocked(std::chrono::steady_clock::time_point spin_until,
                                         absl::Time deadline, bool* blocked) {
  // What this wait depends on (a fetch from an owner, a task) may still be queued. A drain
  // releases the mutex: the caller looks again before anything sleeps.
  if (outbox_.DrainLocked()) return false;
  if (std::chrono::steady_clock::now() < spin_until) {
    uint64_t seen = completions_.load(std::memory_order_acquire);
    mu_.Unlock();
    while (completions_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < spin_until) {
      sched_yield();
    }
    mu_.Lock();
    return false;
  }
  if (!*blocked && tls_executing_task && !options_.is_driver) {
    *blocked = true;
    NotifyBlocked(true);
    if (outbox_.DrainLocked()) return false;
  }
  return ready_cv_.WaitWithDeadline(&mu_, deadline) && absl::Now() >= deadline;
}

internal::ValueView CoreWorker::GetWithRecovery(const ObjectId& id,
                                                std::optional<std::chrono::microseconds> timeout,
                                                int recoveries) {
  if (id.IsNil()) throw ObjectLostError("Get on a nil ObjectRef");
  absl::Time deadline = timeout ? absl::Now() + absl::FromChrono(*timeout) : absl::InfiniteFuture();
  auto spin_until = std::chrono::steady_clock::now() +
                    std::min<std::chrono::microseconds>(config::get_spin_us(),
                                                        timeout.value_or(config::get_spin_us()));
  bool blocked = false;
  std::string owner_address;  // set when reading a borrowed object
  // In-store objects: where copies are, when the store of this node may lack one.
  google::protobuf::RepeatedPtrField<proto::Address> locations;
  bool remote_copies = false;
  {
    OutboxLock lock(&mu_, &outbox_);
    while (true) {
      if (shut_down_) throw InvalidUsageError("raio is shut down");
      ObjectEntry* e = objects_.Find(id);
      if (e == nullptr) {
        throw ObjectLostError(absl::StrCat("object ", id.Hex(),
                                           " is not owned by this process or was already freed"));
      }
      if (e->ready) {
        if (blocked) NotifyBlocked(false);
        if (e->error) ThrowError(*e->error, id);
        if (!e->in_store) return e->value;
        if (e->borrowed) owner_address = e->owner_address;
        for (const auto& a : e->locations) {
          if (a.node_id() != options_.node_address.node_id()) remote_copies = true;
        }
        if (remote_copies) locations.Add(e->locations.begin(), e->locations.end());
        break;  // read from the store below, without holding mu_
      }
      if (e->borrowed) {
        FetchBorrowedLocked(id, *e);
        // An unreachable owner fails it at once: that completion is not waited for.
        if (e->ready) continue;
      }
      if (WaitForCompletionLocked(spin_until, deadline, &blocked)) {
        if (blocked) NotifyBlocked(false);
        submitter_.AssertHeld();
        std::string state = submitter_.DescribePending(id);
        actor_submitter_.AssertHeld();
        if (state.empty()) state = actor_submitter_.DescribePending(id);
        if (state.empty()) {
          state = e->borrowed ? absl::StrCat("its owner, ", DescribeOwner(e->owner_address),
                                             ", has not produced it yet")
                              : "the task that makes it keeps running";
        }
        throw GetTimeoutError(absl::StrCat("object ", id.Hex(), " was not ready within ",
                                           timeout ? timeout->count() : 0, " us: ", state));
      }
    }
  }
  // The caller holds a reference, so the owner (this process) keeps the object alive
  // while it is pinned and read. A copy on another node is pulled here first (or when
  // this node's copy, a secondary one, was evicted meanwhile).
  auto pull = [&] {
    proto::PullObjectsRequest req;
    proto::PullObject* o = req.add_objects();
    o->set_object_id(id.Binary());
    *o->mutable_sources() = locations;
    absl::Status s = PullAndReport(req, {owner_address});
    if (s.ok()) return false;
    if (s.code() == absl::StatusCode::kResourceExhausted) {
      throw ObjectStoreFullError(std::string(s.message()));
    }
    // Its copies' node may be dying: once declared dead, the object is made again (or its
    // owner says where it is now).
    if (recoveries < kMaxGetRecoveries && AwaitRecovery(id, locations, deadline)) return true;
    throw ObjectLostError(
        absl::StrCat("object ", id.Hex(), ", owned by ",
                     owner_address.empty() ? "this process" : DescribeOwner(owner_address),
                     ", could not be fetched from any node holding a copy: ", s.message()));
  };
  auto again = [&] {
    std::optional<std::chrono::microseconds> left;
    if (timeout) {
      left = std::max(std::chrono::microseconds(0),
                      absl::ToChronoMicroseconds(deadline - absl::Now()));
    }
    return GetWithRecovery(id, left, recoveries + 1);
  };
  bool pulled = false;
  if (remote_copies && NeedsPull(locations)) {
    if (pull()) return again();
    pulled = true;
  }
  auto view = store_->Get(id);
  if (!view.ok() && view.status().code() == absl::StatusCode::kNotFound && remote_copies &&
      !pulled) {
    if (pull()) return again();
    view = store_->Get(id);
  }
  if (!view.ok()) {
    if (view.status().code() == absl::StatusCode::kResourceExhausted) {
      throw ObjectStoreFullError(std::string(view.status().message()));
    }
    if (view.status().code() == absl::StatusCode::kAborted) {
      throw OwnerDiedError(std::string(view.status().message()));
    }
    if (!owner_address.empty()) {
      throw OwnerDiedError(absl::StrCat("object ", id.Hex(), " is gone: its owner, ",
                                        DescribeOwner(owner_address), ", freed it or died (",
                                        view.status().message(), ")"));
    }
    throw ObjectLostError(absl::StrCat(
        "object ", id.Hex(), " could not be read from the store: ", view.status().message(),
        owner_address.empty() ? ""
                              : absl::StrCat(" (its owner, ", DescribeOwner(owner_address),
                                             ", freed it or exited)")));
  }
  return *view;
}

bool CoreWorker::AwaitRecovery(const ObjectId& id,
                               const google::protobuf::RepeatedPtrField<proto::Address>& locations,
                               absl::Time deadline) {
  const absl::Time bound =
      std::min(deadline, absl::Now() + absl::FromChrono(worker::NodeDeathBound()));
  OutboxLock lock(&mu_, &outbox_);
  auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ObjectEntry* e = objects_.Find(id);
    if (e == nullptr || shut_down_ || !e->ready || e->error) return true;
    if (static_cast<int>(e->locations.size()) != locations.size()) return true;
    for (int i = 0; i < locations.size(); ++i) {
      if (e->locations[i].node_id() != locations[i].node_id()) return true;
    }
    return false;
  };
  while (!changed()) {
    if (ready_cv_.WaitWithDeadline(&mu_, bound) || absl::Now() >= bound) break;
  }
  if (ObjectEntry* e = objects_.Find(id); e != nullptr && !changed() && e->borrowed) {
    // Nothing heard here of the copies' node: its owner may know better.
    objects_.Reset(id);
    e->fetch_requested = false;
  }
  return absl::Now() < deadline;
}

std::vector<bool> CoreWorker::Wait(const std::vector<ObjectId>& ids, int num_objects,
                                   std::optional<std::chrono::microseconds> timeout) {
  absl::Time deadline = timeout ? absl::Now() + absl::FromChrono(*timeout) : absl::InfiniteFuture();
  auto spin_until = std::chrono::steady_clock::now() +
                    std::min<std::chrono::microseconds>(config::get_spin_us(),
                                                        timeout.value_or(config::get_spin_us()));
  std::vector<bool> ready(ids.size(), false);
  // Readiness only grows (a freed object counts as ready), so each pass looks only at the
  // objects still pending: a wake per completion would otherwise rescan every id.
  std::vector<std::size_t> pending(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) pending[i] = i;
  int n = 0;
  bool blocked = false;
  OutboxLock lock(&mu_, &outbox_);
  while (true) {
    if (shut_down_) throw InvalidUsageError("raio is shut down");
    std::size_t still = 0;
    for (std::size_t i : pending) {
      ObjectEntry* e = objects_.Find(ids[i]);
      if (e != nullptr && e->borrowed && !e->ready) FetchBorrowedLocked(ids[i], *e);
      // An unknown object can never become ready here: count it as ready (Get reports it).
      if (e == nullptr || e->ready) {
        ready[i] = true;
        ++n;
      } else {
        pending[still++] = i;
      }
    }
    pending.resize(still);
    if (n >= num_objects) break;
    if (WaitForCompletionLocked(spin_until, deadline, &blocked)) break;
  }
  if (blocked) NotifyBlocked(false);
  return ready;
}

void CoreWorker::AddLocalReference(const ObjectId& id) {
  OutboxLock lock(&mu_, &outbox_);
  objects_.AddLocalRef(id);
}

void CoreWorker::RemoveLocalReference(const ObjectId& id) {
  OutboxLock lock(&mu_, &outbox_);
  objects_.RemoveLocalRef(id);
}

void CoreWorker::Cancel(const ObjectId& id, bool force) {
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) throw InvalidUsageError("raio is shut down");
  submitter_.AssertHeld();
  submitter_.Cancel(id, force);
}

std::size_t CoreWorker::NumOwnedObjects() {
  OutboxLock lock(&mu_, &outbox_);
  return objects_.size();
}

proto::NodeStats CoreWorker::GetNodeStats() {
  auto reply = rpc::CallSync(*node_, proto::GET_NODE_STATS, proto::Empty(),
                             config::control_rpc_timeout_ms());
  proto::NodeStats stats;
  if (!reply.ok() || !stats.ParseFromString(*reply)) {
    throw ClusterUnavailableError("the node daemon did not return its stats");
  }
  return stats;
}

void CoreWorker::ThrowError(const proto::ErrorInfo& e, const ObjectId& id) {
  switch (e.type()) {
    case proto::TASK_ERROR:
      throw TaskError(e.exception_type(), e.message(), e.function_name(), e.node_id());
    case proto::WORKER_CRASHED:
      throw WorkerCrashedError(e.message());
    case proto::UNSCHEDULABLE:
      throw UnschedulableError(e.message());
    case proto::FUNCTION_NOT_FOUND:
      throw RemoteFunctionNotFoundError(e.message());
    case proto::SERIALIZATION:
      throw SerializationError(e.message());
    case proto::NODE_DIED:
      throw NodeDiedError(e.message());
    case proto::CLUSTER_UNAVAILABLE:
      throw ClusterUnavailableError(e.message());
    case proto::OBJECT_STORE_FULL:
      throw ObjectStoreFullError(e.message());
    case proto::ACTOR_DIED:
      throw ActorDiedError(e.message());
    case proto::OWNER_DIED:
      throw OwnerDiedError(e.message());
    case proto::TASK_CANCELLED:
      throw TaskCancelledError(e.message());
    case proto::OUT_OF_MEMORY:
      throw OutOfMemoryError(e.message());
    case proto::INVALID_USAGE:
      throw InvalidUsageError(e.message());
    default:
      throw ObjectLostError(absl::StrCat("object ", id.Hex(), ": ", e.message()));
  }
}

}  // namespace raio::worker
