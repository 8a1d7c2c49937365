// CoreWorker, part three: the actor API (creation, calls, kill, lookup by name).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/common/placement_resources.h"
#include "raio/common/resources.h"
#include "raio/errors.h"
#include "raio/internal/returns.h"
#include "raio/rpc.pb.h"
#include "raio/rpc/listener.h"
#include "raio/worker/core_worker.h"

namespace raio::worker {

void CoreWorker::ResolveArgsBlocking(std::vector<internal::TaskArg>& args,
                                     google::protobuf::RepeatedPtrField<proto::TaskArg>* out,
                                     std::vector<ObjectId>* held) {
  // Fills `arg` from a ready object.
  auto fill = [&](proto::TaskArg* arg, const ObjectId& id) {
    Wait({id}, 1, std::nullopt);
    bool in_store = false;
    {
      OutboxLock lock(&mu_, &outbox_);
      ObjectEntry* e = objects_.Find(id);
      if (e == nullptr) {
        throw ObjectLostError(absl::StrCat("argument object ", id.Hex(), " is unknown or freed"));
      }
      if (e->error) ThrowError(*e->error, id);
      in_store = e->in_store;
      if (!in_store) {
        arg->set_value(std::string(e->value.bytes));
        arg->set_format(static_cast<uint32_t>(e->value.format));
        arg->set_dtype(static_cast<uint32_t>(e->value.dtype));
        return;
      }
    }
    internal::ValueView v = Get(id, std::nullopt);  // copy out of the store
    arg->set_value(std::string(v.bytes));
    arg->set_format(static_cast<uint32_t>(v.format));
    arg->set_dtype(static_cast<uint32_t>(v.dtype));
  };
  for (auto& a : args) {
    proto::TaskArg* arg = out->Add();
    switch (a.kind) {
      case internal::TaskArg::Kind::kValue:
        arg->set_value(std::move(a.value.bytes));
        arg->set_format(static_cast<uint32_t>(a.value.format));
        arg->set_dtype(static_cast<uint32_t>(a.value.dtype));
        if (!a.contained.empty()) {
          OutboxLock lock(&mu_, &outbox_);
          for (const auto& c : a.contained) {
            objects_.AddTaskArgRef(c);
            held->push_back(c);
          }
        }
        break;
      case internal::TaskArg::Kind::kObjectRef:
        fill(arg, a.refs[0]);
        break;
      case internal::TaskArg::Kind::kObjectRefList:
        for (const auto& id : a.refs) fill(arg->mutable_list()->add_elements(), id);
        break;
    }
  }
}

ActorId CoreWorker::CreateActor(const std::string& factory_name, const std::string& class_name,
                                std::vector<internal::TaskArg> args,
                                const internal::ActorOptions& options) {
  auto resources = ResourceSet::FromMap(options.resources);
  if (!resources.ok()) {
    throw InvalidUsageError(
        absl::StrCat("invalid actor resources: ", resources.status().message()));
  }
  if (options.max_concurrency < 1 || options.max_concurrency > config::max_actor_concurrency()) {
    throw InvalidUsageError(
        absl::StrCat("SetMaxConcurrency: must be between 1 and ", config::max_actor_concurrency()));
  }
  if (options.max_restarts < -1) throw InvalidUsageError("SetMaxRestarts: must be >= -1");
  if (options.max_task_retries < -1) throw InvalidUsageError("SetMaxTaskRetries: must be >= -1");
  proto::CreateActorRequest req;
  proto::ActorSpec* spec = req.mutable_spec();
  ActorId id = RandomId<ActorId>();
  spec->set_actor_id(id.Binary());
  spec->set_factory_name(factory_name);
  spec->set_class_name(class_name);
  const std::string call = absl::StrCat("raio::Actor(", factory_name, ")");
  SetStrategy(call, options.strategy, options.label_selector, spec);
  SetPlacementGroup(call, options, &*resources, spec);
  std::vector<ObjectId> held;  // factory arguments are copied inline: restarts reuse them
  ResolveArgsBlocking(args, spec->mutable_args(), &held);
  resources->ToProto(spec->mutable_resources());
  spec->set_name(options.name);
  spec->set_namespace_(options.ns.empty() ? options_.default_namespace : options.ns);
  spec->set_max_restarts(options.max_restarts);
  spec->set_max_task_retries(options.max_task_retries);
  spec->set_max_concurrency(options.max_concurrency);
  spec->set_detached(options.detached);
  spec->set_owner_worker_id(options_.worker_id.Binary());
  if (std::size_t bytes = req.ByteSizeLong(); bytes > config::max_request_bytes()) {
    // Factory arguments travel inline (restarts reuse them), in one frame.
    OutboxLock lock(&mu_, &outbox_);
    for (const auto& h : held) objects_.RemoveTaskArgRef(h);
    throw InvalidUsageError(absl::StrCat(
        "raio::Actor(", factory_name, "): the factory's arguments take ", bytes,
        " bytes, above the limit of ", config::max_request_bytes(),
        " bytes for one request; pass large data as an ObjectRef<T> parameter instead"));
  }
  auto reply = rpc::CallSync(*node_, proto::CREATE_ACTOR, req, config::control_rpc_timeout_ms());
  {
    OutboxLock lock(&mu_, &outbox_);
    for (const auto& h : held) objects_.RemoveTaskArgRef(h);
  }
  if (!reply.ok()) {
    std::string message(reply.status().message());
    switch (reply.status().code()) {
      case absl::StatusCode::kAlreadyExists:
      case absl::StatusCode::kInvalidArgument:
        throw InvalidUsageError("raio::Actor: " + message);
      case absl::StatusCode::kResourceExhausted:  // no node can ever hold it
      case absl::StatusCode::kNotFound:           // its placement group is gone
        throw UnschedulableError(message);
      default:
        throw ClusterUnavailableError("cannot create the actor: " + message);
    }
  }
  proto::ActorInfo info;
  if (info.ParseFromString(*reply) && info.infeasible()) {
    // It waits for a node that can hold it (a standalone cluster): say so once, here.
    RAIO_LOG_WARN("{}", info.pending_reason());
  }
  {
    OutboxLock lock(&mu_, &outbox_);
    actor_submitter_.AssertHeld();
    actor_submitter_.NoteCreated(id, resources->ToString());
  }
  return id;
}

ObjectId CoreWorker::SubmitActorTask(const ActorId& actor, const std::string& method_name,
                                     std::vector<internal::TaskArg> args, int num_returns) {
  if (actor.IsNil()) throw InvalidUsageError("call on an empty ActorHandle");
  if (num_returns < 1) throw InvalidUsageError("num_returns must be >= 1");
  proto::PushActorTaskRequest req;
  req.set_actor_id(actor.Binary());
  req.set_method_name(method_name);
  proto::TaskSpec* spec = req.mutable_spec();
  spec->set_function_name(method_name);
  spec->set_owner_worker_id(options_.worker_id.Binary());
  spec->set_job_id(options_.job_id);
  if (num_returns > 1) spec->set_num_returns(static_cast<uint32_t>(num_returns));
  std::vector<ObjectId> contained;
  for (auto& arg : args) {
    contained.insert(contained.end(), arg.contained.begin(), arg.contained.end());
  }
  std::vector<RefArg> ref_args = SplitArgs(args, spec->mutable_args());
  if (std::size_t bytes = req.ByteSizeLong(); bytes > config::max_request_bytes()) {
    // By-value arguments of actor calls travel inline, in one frame (objects of ObjectRef
    // arguments are checked when they resolve).
    throw InvalidUsageError(absl::StrCat(
        "actor call ", method_name, ": its arguments take ", bytes, " bytes, above the limit of ",
        config::max_request_bytes(),
        " bytes for one request; raio::Put large values and pass the ObjectRef instead"));
  }
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) throw InvalidUsageError("raio is shut down");
  TaskId task_id = MakeTaskId(options_.worker_id, next_task_seq_++);
  spec->set_task_id(task_id.Binary());  // caller_address: added to each push (TaskSubmitter)
  ObjectId id = MakeObjectId(task_id, 1);
  for (int i = 0; i < num_returns; ++i) {
    objects_.Create(internal::NthReturnId(id, static_cast<uint32_t>(i)), /*local_refs=*/1);
  }
  for (const auto& c : contained) objects_.AddTaskArgRef(c);
  FetchBorrowedArgsLocked(ref_args);
  actor_submitter_.AssertHeld();
  actor_submitter_.Submit(actor, std::move(req), id, num_returns, std::move(contained),
                          std::move(ref_args));
  return id;
}

void CoreWorker::KillActor(const ActorId& actor, bool no_restart) {
  if (actor.IsNil()) throw InvalidUsageError("Kill on an empty ActorHandle");
  proto::KillActorRequest req;
  req.set_actor_id(actor.Binary());
  req.set_no_restart(no_restart);
  // The incarnation this kill ends, as this process knows it: a restart may be up (and
  // known here) before the reply is taken below, and must not be taken for the dying one.
  std::optional<uint32_t> killed;
  {
    OutboxLock lock(&mu_, &outbox_);
    actor_submitter_.AssertHeld();
    killed = actor_submitter_.AliveIncarnation(actor);
  }
  auto reply = rpc::CallSync(*node_, proto::KILL_ACTOR, req, config::control_rpc_timeout_ms());
  if (!reply.ok()) {
    throw ClusterUnavailableError(
        absl::StrCat("cannot kill the actor: ", reply.status().message()));
  }
  // Its process is ending: later calls go to the next incarnation (or fail with its death),
  // never to the dying process.
  OutboxLock lock(&mu_, &outbox_);
  actor_submitter_.AssertHeld();
  if (!shut_down_) actor_submitter_.OnKilled(actor, killed);
}

std::optional<ActorId> CoreWorker::GetNamedActor(const std::string& name, const std::string& ns,
                                                 const std::string& class_name) {
  proto::GetNamedActorRequest req;
  req.set_name(name);
  req.set_namespace_(ns.empty() ? options_.default_namespace : ns);
  auto reply = rpc::CallSync(*node_, proto::GET_NAMED_ACTOR, req, config::control_rpc_timeout_ms());
  if (!reply.ok()) {
    if (reply.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
    throw ClusterUnavailableError(
        absl::StrCat("cannot look up the actor: ", reply.status().message()));
  }
  proto::ActorInfo info;
  if (!info.ParseFromString(*reply)) throw ClusterUnavailableError("malformed actor info");
  if (info.class_name() != class_name) {
    throw InvalidUsageError(absl::StrCat("raio::GetActor: actor '", name, "' is a ",
                                         info.class_name(), ", not a ", class_name));
  }
  return ActorId::FromBinary(info.actor_id());
}

}  // namespace raio::worker
