#include "raio/worker/task_executor.h"

#include <cxxabi.h>

#include <chrono>
#include <deque>
#include <future>
#include <iterator>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/ids.h"
#include "raio/common/logging.h"
#include "raio/common/process.h"
#include "raio/errors.h"
#include "raio/rpc.pb.h"
#include "raio/worker/core_worker.h"
#include "raio/worker/function_registry.h"
#include "raio/worker/value_codec.h"

namespace raio::worker {

TaskExecutor::TaskExecutor() : loop_("raio-exec", config::loop_spin_us()) { RegisterHandlers(); }

TaskExecutor::~TaskExecutor() {
  Stop();
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool_stop_ = true;
  }
  pool_cv_.notify_all();
  for (auto& t : pool_) t.join();
}

absl::Status TaskExecutor::Listen(const std::string& socket_path) {
  auto l = rpc::Listener::ListenUnix(loop_.io(), socket_path,
                                     [this](std::shared_ptr<rpc::Connection> c) { Accept(c); });
  if (!l.ok()) return l.status();
  listener_ = std::move(*l);
  return absl::OkStatus();
}

void TaskExecutor::Accept(const std::shared_ptr<rpc::Connection>& conn) {
  conn->Start([this](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
                     std::string_view body) { OnRequest(c, h, body); },
              nullptr);
}

absl::StatusOr<int> TaskExecutor::ListenTcp(const std::string& ip) {
  auto l = rpc::Listener::ListenTcp(loop_.io(), ip, 0,
                                    [this](std::shared_ptr<rpc::Connection> c) { Accept(c); });
  if (!l.ok()) return l.status();
  tcp_listener_ = std::move(*l);
  return tcp_listener_->port();
}

void TaskExecutor::RegisterHandlers() {
  service_.Handle<proto::EXIT_WORKER>(
      [this](const rpc::Responder<proto::EXIT_WORKER>&, const proto::Empty&) { Stop(); });
  service_.Handle<proto::PUSH_ACTOR_TASK>(
      [this](const rpc::Responder<proto::PUSH_ACTOR_TASK>& r, proto::PushActorTaskRequest& req) {
        if (!pool_.empty()) {
          std::lock_guard<std::mutex> lock(pool_mu_);
          pool_queue_.push_back(Job{r.conn(), r.header(), std::move(req)});
          pool_cv_.notify_one();
          return;
        }
        RunActorTask(r.conn(), r.header(), req);
      });
  service_.HandleInto<proto::PUSH_TASK>(&request_, [this](const rpc::Responder<proto::PUSH_TASK>& r,
                                                          const proto::PushTaskRequest& req) {
    const std::string& name = req.spec().function_name();
    const RegisteredFunction* fn = FindFunctionByName(name);
    Execute(
        r.conn(), r.header(), req,
        [fn](const std::vector<internal::ValueView>& args) { return fn->invoker(fn->key, args); },
        fn != nullptr,
        absl::StrCat("remote function '", name, "' is not registered in this worker's executable (",
                     SelfExecutablePath(), "); add RAIO_REMOTE(", name, ")"));
  });
  // The node's notices for this worker's own submissions.
  node_service_.Handle<proto::LEASE_INFEASIBLE>(
      [this](const rpc::Responder<proto::LEASE_INFEASIBLE>&,
             const proto::LeaseInfeasibleNotice& notice) {
        if (core_ != nullptr) core_->OnLeaseInfeasible(notice);
      });
  node_service_.Handle<proto::NODE_REMOVED>(
      [this](const rpc::Responder<proto::NODE_REMOVED>&, const proto::NodeRemovedNotice& notice) {
        if (core_ != nullptr) core_->OnNodeRemoved(notice);
      });
  node_service_.Handle<proto::CREATE_ACTOR_INSTANCE>(
      [this](const rpc::Responder<proto::CREATE_ACTOR_INSTANCE>& r,
             proto::CreateActorInstanceRequest& req) {
        loop_.Post([this, conn = r.conn(), h = r.header(), req = std::move(req)]() mutable {
          CreateActorInstance(conn, h, std::move(req));
        });
      });
}

void TaskExecutor::OnRequest(const std::shared_ptr<rpc::Connection>& conn,
                             const rpc::FrameHeader& h, std::string_view body) {
  if (!service_.Dispatch(conn, h, body)) service_.RejectUnknown(conn, h);
}

void TaskExecutor::OnNodeRequest(const std::shared_ptr<rpc::Connection>& conn,
                                 const rpc::FrameHeader& h, std::string_view body) {
  if (!node_service_.Dispatch(conn, h, body)) node_service_.RejectUnknown(conn, h);
}

void TaskExecutor::CreateActorInstance(const std::shared_ptr<rpc::Connection>& conn,
                                       const rpc::FrameHeader& h,
                                       proto::CreateActorInstanceRequest req) {
  proto::CreateActorInstanceReply reply;
  auto fail = [&](const std::string& type, const std::string& message) {
    reply.mutable_error()->set_type(proto::TASK_ERROR);
    reply.mutable_error()->set_exception_type(type);
    reply.mutable_error()->set_message(message);
    reply.mutable_error()->set_function_name(req.spec().factory_name());
    reply.mutable_error()->set_node_id(node_id_hex_);
  };
  const RegisteredFactory* factory = FindFactoryByName(req.spec().factory_name());
  if (actor_.instance != nullptr) {
    fail("raio::InvalidUsageError", "this worker already hosts an actor");
  } else if (factory == nullptr) {
    fail("raio::RemoteFunctionNotFoundError",
         absl::StrCat("actor factory '", req.spec().factory_name(),
                      "' is not registered in this worker's executable"));
  } else {
    std::vector<internal::ValueView> args;
    for (const auto& a : req.spec().args()) {
      auto v = ResolveArg(a);
      if (!v.ok()) {
        fail("raio::ObjectLostError", std::string(v.status().message()));
        break;
      }
      args.push_back(std::move(*v));
    }
    if (!reply.has_error()) {
      CoreWorker::SetExecutingTask(true);
      try {
        actor_ = factory->invoker(factory->key, args);
        actor_id_ = req.spec().actor_id();
        actor_class_ = req.spec().class_name();
      } catch (const std::exception& e) {
        fail(Demangle(typeid(e).name()), e.what());
      } catch (...) {
        std::type_info* t = abi::__cxa_current_exception_type();
        fail(t ? Demangle(t->name()) : "unknown", "non-std::exception thrown");
      }
      CoreWorker::SetExecutingTask(false);
    }
  }
  if (!reply.has_error() && req.spec().max_concurrency() > 1) {
    for (int i = 0; i < req.spec().max_concurrency(); ++i) {
      pool_.emplace_back([this] {
        while (true) {
          Job job;
          {
            std::unique_lock<std::mutex> lock(pool_mu_);
            pool_cv_.wait(lock, [this] { return pool_stop_ || !pool_queue_.empty(); });
            if (pool_stop_) return;
            job = std::move(pool_queue_.front());
            pool_queue_.pop_front();
          }
          RunActorTask(job.conn, job.header, job.request);
        }
      });
    }
  }
  conn->Reply(h, reply);
}

void TaskExecutor::RunActorTask(const std::shared_ptr<rpc::Connection>& conn,
                                const rpc::FrameHeader& h, const proto::PushActorTaskRequest& req) {
  const RegisteredMethod* method = FindMethodByName(req.method_name());
  bool ok = method != nullptr && actor_.instance != nullptr && req.actor_id() == actor_id_;
  std::string why = actor_.instance == nullptr || req.actor_id() != actor_id_
                        ? "this worker does not host that actor"
                        : absl::StrCat("actor method '", req.method_name(),
                                       "' is not registered in this worker's executable");
  proto::PushTaskRequest request;
  *request.mutable_spec() = req.spec();
  request.set_attempt(req.attempt());
  void* instance = actor_.instance;
  Execute(
      conn, h, request,
      [method, instance](const std::vector<internal::ValueView>& args) {
        return method->invoker(instance, method->key, args);
      },
      ok, why, /*flush_reply=*/true);
}

void TaskExecutor::Stop() { loop_.Stop(); }

std::vector<ObjectId> TaskExecutor::CollectStoreIds(
    const google::protobuf::RepeatedPtrField<proto::TaskArg>& args) {
  std::vector<ObjectId> ids;
  for (const auto& arg : args) {
    if (arg.kind_case() == proto::TaskArg::kList) {
      for (const auto& e : arg.list().elements()) {
        if (e.in_store()) ids.push_back(ObjectId::FromBinary(e.object_id()));
      }
    } else if (arg.in_store()) {
      ids.push_back(ObjectId::FromBinary(arg.object_id()));
    }
  }
  return ids;
}

absl::Status TaskExecutor::PullRemoteArgs(
    const google::protobuf::RepeatedPtrField<proto::TaskArg>& args) {
  if (core_ == nullptr) return absl::OkStatus();
  proto::PullObjectsRequest pulls;
  std::vector<std::string> owners;
  auto add = [&](const proto::TaskArg& arg) {
    if (!arg.in_store() || !core_->NeedsPull(arg.locations())) return;
    proto::PullObject* o = pulls.add_objects();
    o->set_object_id(arg.object_id());
    *o->mutable_sources() = arg.locations();
    owners.push_back(arg.owner_address());
  };
  for (const auto& arg : args) {
    if (arg.kind_case() == proto::TaskArg::kList) {
      for (const auto& e : arg.list().elements()) add(e);
    } else {
      add(arg);
    }
  }
  if (pulls.objects_size() == 0) return absl::OkStatus();
  absl::Status s = core_->PullAndReport(pulls, owners);
  if (s.ok() || s.code() == absl::StatusCode::kResourceExhausted) return s;
  return absl::Status(s.code(), absl::StrCat("an argument could not be fetched to node ",
                                             node_id_hex_, ": ", s.message()));
}

absl::StatusOr<internal::ValueView> TaskExecutor::ResolveArg(
    const proto::TaskArg& arg, std::deque<internal::ValueView>* pinned) {
  if (arg.kind_case() == proto::TaskArg::kList) {
    // A std::vector parameter from ObjectRefs: one msgpack array of the elements.
    auto joined = std::make_shared<std::string>();
    AppendMsgpackArrayHeader(joined.get(), static_cast<uint32_t>(arg.list().elements_size()));
    for (const auto& element : arg.list().elements()) {
      auto v = ResolveArg(element, pinned);
      if (!v.ok()) return v.status();
      absl::Status s = AppendAsMsgpack(*v, joined.get());
      if (!s.ok()) return s;
    }
    return internal::ValueView{internal::ValueFormat::kMsgpack, internal::DType::kNone, *joined,
                               joined};
  }
  if (arg.in_store()) {
    if (pinned != nullptr && !pinned->empty()) {
      internal::ValueView v = std::move(pinned->front());
      pinned->pop_front();
      return v;
    }
    if (store_ == nullptr) return absl::FailedPreconditionError("no object store");
    return store_->Get(ObjectId::FromBinary(arg.object_id()));
  }
  return internal::ValueView{static_cast<internal::ValueFormat>(arg.format()),
                             static_cast<internal::DType>(arg.dtype()), arg.value(), nullptr};
}

absl::Status TaskExecutor::StoreResult(const proto::TaskSpec& spec, internal::EncodedValue result,
                                       proto::PushTaskReply* reply) {
  const uint32_t expected = std::max<uint32_t>(spec.num_returns(), 1);
  bool several = result.format == internal::ValueFormat::kReturns;
  if (several && expected == 1) {
    // A std::tuple of one element: one return, packed as a part.
    auto parts = UnpackReturns(result.bytes);
    if (!parts.ok()) return parts.status();
    if (parts->size() != 1) {
      throw SerializationError(absl::StrCat(spec.function_name(), " returned ", parts->size(),
                                            " values but the caller expects 1"));
    }
    internal::ValueView part = (*parts)[0];
    result = internal::EncodedValue{part.format, part.dtype, std::string(part.bytes)};
    several = false;
  } else if (several != (expected > 1)) {
    // Only a caller built from other sources than this worker gets here.
    throw SerializationError(absl::StrCat(
        spec.function_name(), several ? " returns several values" : " returns one value",
        " but the caller expects ", expected));
  }
  if (several) {
    auto parts = UnpackReturns(result.bytes);
    if (!parts.ok()) return parts.status();
    if (parts->size() != expected) {
      throw SerializationError(absl::StrCat(spec.function_name(), " returned ", parts->size(),
                                            " values but the caller expects ", expected));
    }
    TaskId task = TaskId::FromBinary(spec.task_id());
    for (uint32_t i = 0; i < expected; ++i) {
      const internal::ValueView& part = (*parts)[i];
      proto::ReturnObject* ret = reply->add_returns();
      ret->set_format(static_cast<uint32_t>(part.format));
      ret->set_dtype(static_cast<uint32_t>(part.dtype));
      if (part.bytes.size() < config::max_inline_object_bytes() || store_ == nullptr) {
        ret->set_value(std::string(part.bytes));
        continue;
      }
      absl::Status s =
          store_->Put(MakeObjectId(task, i + 1), WorkerId::FromBinary(spec.owner_worker_id()),
                      part.format, part.dtype, part.bytes.data(), part.bytes.size());
      if (!s.ok() && s.code() != absl::StatusCode::kAlreadyExists) {
        // The call fails as a whole: the parts stored already would have no owner's ref.
        for (uint32_t j = 0; j < i; ++j) {
          if (reply->returns(static_cast<int>(j)).in_store()) {
            store_->Delete(MakeObjectId(task, j + 1));
          }
        }
        reply->clear_returns();
        return s;
      }
      ret->set_in_store(true);
      if (core_ != nullptr) *reply->mutable_stored_at() = core_->options().node_address;
    }
    return absl::OkStatus();
  }
  if (result.bytes.size() < config::max_inline_object_bytes() || store_ == nullptr) {
    reply->set_format(static_cast<uint32_t>(result.format));
    reply->set_dtype(static_cast<uint32_t>(result.dtype));
    *reply->mutable_return_value() = std::move(result.bytes);
    return absl::OkStatus();
  }
  ObjectId id = MakeObjectId(TaskId::FromBinary(spec.task_id()), 1);
  absl::Status s = store_->Put(id, WorkerId::FromBinary(spec.owner_worker_id()), result.format,
                               result.dtype, result.bytes.data(), result.bytes.size());
  // A retry after a worker died may find the first attempt's sealed result: use it.
  if (!s.ok() && s.code() != absl::StatusCode::kAlreadyExists) return s;
  reply->set_in_store(true);
  if (core_ != nullptr) *reply->mutable_stored_at() = core_->options().node_address;
  return absl::OkStatus();
}

void TaskExecutor::Run() { loop_.RunInThisThread(); }

void TaskExecutor::Execute(const std::shared_ptr<rpc::Connection>& conn, const rpc::FrameHeader& h,
                           const proto::PushTaskRequest& request, const Invoke& invoke, bool found,
                           const std::string& not_found_message, bool flush_reply) {
  const proto::TaskSpec& spec = request.spec();
  proto::PushTaskReply reply;
  auto fail = [&](proto::ErrorType type, std::string type_name, std::string message) {
    auto* e = reply.mutable_error();
    e->set_type(type);
    e->set_exception_type(std::move(type_name));
    e->set_message(std::move(message));
    e->set_function_name(spec.name().empty() ? spec.function_name() : spec.name());
    e->set_node_id(node_id_hex_);
  };
  auto start = std::chrono::steady_clock::now();
  if (!found) {
    fail(proto::FUNCTION_NOT_FOUND, "", not_found_message);
  } else {
    // The arguments in the store are pinned all together or not at all: a task waits
    // while others' pinned arguments fill the store (admission), and fails only when its
    // own can never fit.
    std::deque<internal::ValueView> pinned;
    absl::Status pin_status;
    if (std::vector<ObjectId> ids = CollectStoreIds(spec.args()); !ids.empty() && store_) {
      pin_status = PullRemoteArgs(spec.args());
      auto views = pin_status.ok() ? store_->GetAll(ids)
                                   : absl::StatusOr<std::vector<internal::ValueView>>(pin_status);
      if (views.ok()) {
        pinned.assign(std::make_move_iterator(views->begin()),
                      std::make_move_iterator(views->end()));
      } else {
        pin_status = views.status();
      }
    }
    std::vector<internal::ValueView> args;
    args.reserve(spec.args_size());
    for (const auto& a : spec.args()) {
      auto v = pin_status.ok() ? ResolveArg(a, &pinned)
                               : absl::StatusOr<internal::ValueView>(pin_status);
      if (!v.ok()) {
        fail(v.status().code() == absl::StatusCode::kResourceExhausted ? proto::OBJECT_STORE_FULL
             : v.status().code() == absl::StatusCode::kAborted         ? proto::OWNER_DIED
                                                                       : proto::OBJECT_LOST,
             "",
             absl::StrCat("cannot read an argument of ", spec.function_name(), ": ",
                          v.status().message()));
        // Its owner may make it again (lineage) and run this task again.
        if (reply.error().type() == proto::OBJECT_LOST)
          reply.mutable_error()->set_argument_lost(true);
        break;
      }
      args.push_back(std::move(*v));
    }
    if (!reply.has_error()) {
      CoreWorker::SetExecutingTask(true);
      // The marker names the one running task; calls of a concurrent actor (a pool of
      // threads) run several at once, so they leave it alone.
      const bool mark = running_ && pool_.empty();
      if (mark) running_->Set(spec.task_id());
      if (spec.placement_group_capture_child_tasks()) {
        CoreWorker::SetCapturingPlacementGroup(
            PlacementGroupId::FromBinary(spec.placement_group_id()).Hex());
      }
      try {
        // ObjectRefs packed into the result: make the task's owner a borrower of each
        // while the ref still exists here, so they outlive this worker's references.
        WorkerId owner = WorkerId::FromBinary(spec.owner_worker_id());
        absl::Status ref_status;
        // Each with the return value (0-based) whose encoding serialized it.
        std::vector<std::pair<uint32_t, proto::ObjectRefInfo>> refs;
        internal::ContainedRefs contained([&](const ObjectId& id) {
          if (core_ == nullptr || !ref_status.ok()) return;
          auto info = core_->RegisterBorrowerFor(id, owner, spec, request.attempt());
          if (!info.ok()) {
            ref_status = info.status();
            return;
          }
          proto::ObjectRefInfo c;
          c.set_object_id(id.Binary());
          c.set_owner_worker_id(info->owner_worker_id);
          c.mutable_owner_address()->ParseFromString(info->owner_address);
          refs.emplace_back(internal::EncodingReturn(), std::move(c));
        });
        internal::EncodedValue result = invoke(args);
        if (!ref_status.ok()) {
          throw ObjectLostError(absl::StrCat("an ObjectRef in the result of ", spec.function_name(),
                                             " is lost: ", ref_status.message()));
        }
        absl::Status s = StoreResult(spec, std::move(result), &reply);
        for (auto& [index, info] : refs) {
          if (s.ok() && reply.returns_size() > 0 && index < uint32_t(reply.returns_size())) {
            *reply.mutable_returns(static_cast<int>(index))->add_contained() = std::move(info);
          } else {
            *reply.add_contained() = std::move(info);
          }
        }
        if (!s.ok()) {
          fail(
              s.code() == absl::StatusCode::kResourceExhausted ? proto::OBJECT_STORE_FULL
                                                               : proto::OBJECT_LOST,
              "",
              absl::StrCat("cannot store the result of ", spec.function_name(), ": ", s.message()));
        }
      } catch (const SerializationError& e) {
        fail(proto::SERIALIZATION, "raio::SerializationError",
             absl::StrCat("arguments or result of ", spec.function_name(), ": ", e.what()));
      } catch (const std::exception& e) {
        fail(proto::TASK_ERROR, Demangle(typeid(e).name()), e.what());
      } catch (...) {
        std::type_info* t = abi::__cxa_current_exception_type();
        fail(proto::TASK_ERROR, t ? Demangle(t->name()) : "unknown", "non-std::exception thrown");
      }
      if (mark) running_->Clear();
      CoreWorker::SetExecutingTask(false);
      CoreWorker::SetCapturingPlacementGroup("");
    }
  }
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                  start);
  reply.set_exec_duration_us(static_cast<uint64_t>(us.count()));
  // Tiny tasks' replies leave together after the batch of pushes that carried them; a
  // longer task's reply goes at once, so the calls queued behind it do not hold it back.
  // An actor call's reply always goes before the next call runs: a later call that ends
  // the process must not take finished calls' results with it (they would fail, or run
  // again after a restart: actor calls are at-most-once once they have completed).
  conn->Reply(h, reply, /*flush_now=*/flush_reply || us > config::reply_coalesce_limit_us());
}

}  // namespace raio::worker
