// CoreWorker, part two: ownership across processes. The owner service that borrowers
// call (ADD_BORROWER, REMOVE_BORROWER, GET_OBJECT), ObjectRef (de)serialization, and
// what happens when an object is freed or becomes ready.
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "raio/common/config.h"
#include "raio/common/logging.h"
#include "raio/errors.h"
#include "raio/owner.pb.h"
#include "raio/rpc.pb.h"
#include "raio/worker/core_worker.h"

namespace raio {
namespace internal {
namespace {
thread_local ContainedRefs* tls_contained = nullptr;
}
ContainedRefs::ContainedRefs() : previous_(tls_contained) { tls_contained = this; }
ContainedRefs::ContainedRefs(std::function<void(const ObjectId&)> on_add)
    : previous_(tls_contained), on_add_(std::move(on_add)) {
  tls_contained = this;
}
ContainedRefs::~ContainedRefs() { tls_contained = previous_; }
void RecordSerializedRef(const ObjectId& id) {
  if (tls_contained != nullptr) tls_contained->Add(id);
}
}  // namespace internal

namespace worker {

std::string CoreWorker::DescribeOwner(const std::string& encoded_address) {
  return rpc::DescribeAddress(rpc::ParseAddress(encoded_address));
}

absl::Status CoreWorker::StartOwnerService() {
  // The socket is this process's own choice, in the directory its node gave it; peers
  // learn it only from the address (never by computing a path).
  std::string path = absl::StrCat(options_.socket_dir, "/o-", options_.worker_id.Hex(), ".sock");
  caller_address_.set_node_id(absl::HexStringToBytes(options_.node_id_hex));
  caller_address_.set_worker_id(options_.worker_id.Binary());
  caller_address_.set_unix_socket(path);
  auto on_accept = [this](std::shared_ptr<rpc::Connection> conn) {
    conn->Start(
        [this](const std::shared_ptr<rpc::Connection>& c, const rpc::FrameHeader& h,
               std::string_view body) {
          if (!owner_service_.Dispatch(c, h, body)) owner_service_.RejectUnknown(c, h);
        },
        [this](const std::shared_ptr<rpc::Connection>& c, const absl::Status&) {
          // The borrowers that registered themselves over this connection are gone.
          OutboxLock lock(&mu_, &outbox_);
          auto it = borrower_conns_.find(c.get());
          if (it == borrower_conns_.end()) return;
          std::set<WorkerId> borrowers = std::move(it->second);
          borrower_conns_.erase(it);
          if (shut_down_) return;
          for (const auto& b : borrowers) objects_.RemoveBorrowerEverywhere(b);
        });
  };
  // Peers on other hosts reach it over TCP at the node's IP.
  auto tcp = rpc::Listener::ListenTcp(loop_.io(), options_.node_ip, 0, on_accept);
  if (!tcp.ok()) return tcp.status();
  owner_tcp_listener_ = std::move(*tcp);
  caller_address_.set_ip(options_.node_ip);
  caller_address_.set_port(owner_tcp_listener_->port());
  // ObjectRefs may travel to any host: their owner address has no socket path.
  proto::Address routable = caller_address_;
  routable.clear_unix_socket();
  owner_address_ = routable.SerializeAsString();
  {
    OutboxLock lock(&mu_, &outbox_);
    resolver_.set_owner_address(owner_address_);
  }
  submitter_.SetCallerAddress(caller_address_);
  auto l = rpc::Listener::ListenUnix(loop_.io(), path, std::move(on_accept));
  if (!l.ok()) return l.status();
  owner_listener_ = std::move(*l);
  return absl::OkStatus();
}

void CoreWorker::RegisterOwnerServiceHandlers() {
  owner_service_.Handle<proto::ADD_BORROWER>(
      [this](const rpc::Responder<proto::ADD_BORROWER>& r, const proto::BorrowerRequest& req) {
        OutboxLock lock(&mu_, &outbox_);
        if (shut_down_) return;
        absl::Status s = AddBorrowerLocked(*r.conn(), req);
        s.ok() ? r.Ok(proto::Empty()) : r.Error(s);
      });
  owner_service_.Handle<proto::REMOVE_BORROWER>(
      [this](const rpc::Responder<proto::REMOVE_BORROWER>&, const proto::BorrowerRequest& req) {
        OutboxLock lock(&mu_, &outbox_);
        if (shut_down_) return;
        ObjectId id = ObjectId::FromBinary(req.object_id());
        WorkerId borrower = WorkerId::FromBinary(req.borrower_worker_id());
        int count = std::max<int>(1, static_cast<int>(req.count()));
        if (borrower == options_.worker_id) {
          for (int i = 0; i < count; ++i) objects_.RemoveLocalRef(id);
        } else {
          objects_.RemoveBorrower(id, borrower, count);
        }
      });
  owner_service_.Handle<proto::GET_OBJECT>(
      [this](const rpc::Responder<proto::GET_OBJECT>& r, const proto::GetObjectRequest& req) {
        OutboxLock lock(&mu_, &outbox_);
        if (shut_down_) return;
        ObjectId id = ObjectId::FromBinary(req.object_id());
        ObjectEntry* e = objects_.Find(id);
        if (e == nullptr || e->borrowed) {
          proto::GetObjectReply reply;
          auto* err = reply.mutable_error();
          err->set_type(proto::OBJECT_LOST);
          err->set_message(absl::StrCat("object ", id.Hex(), " was freed by its owner"));
          r.Ok(reply);
          return;
        }
        e->remote_getters.emplace_back(r.conn(), r.header());
        if (e->ready) OnObjectReady(id, *e);
      });
  owner_service_.Handle<proto::ADD_OBJECT_LOCATION>(
      [this](const rpc::Responder<proto::ADD_OBJECT_LOCATION>&,
             const proto::ObjectLocationNotice& notice) {
        if (notice.object_id().size() != ObjectId::kSize || notice.node().port() <= 0) return;
        OutboxLock lock(&mu_, &outbox_);
        if (shut_down_) return;
        AddObjectLocationLocked(ObjectId::FromBinary(notice.object_id()), notice.node());
      });
}

void CoreWorker::AddObjectLocationLocked(const ObjectId& id, const proto::Address& node) {
  ObjectEntry* e = objects_.Find(id);
  if (e != nullptr && !e->borrowed) {
    AddLocation(*e, node);
    return;
  }
  // Freed before the copy was reported: it has no other way to go.
  auto req = std::make_shared<proto::ObjectIdRequest>();
  req->set_object_id(id.Binary());
  outbox_.Run([this, node, req] {
    if (auto conn = pool_.Get(node); conn.ok()) (*conn)->SendOneWay(proto::DELETE_OBJECT, *req);
  });
}

bool CoreWorker::NeedsPull(
    const google::protobuf::RepeatedPtrField<proto::Address>& locations) const {
  if (locations.empty()) return false;
  for (const auto& a : locations) {
    if (a.node_id() == options_.node_address.node_id()) return false;
  }
  return true;
}

absl::Status CoreWorker::PullAndReport(const proto::PullObjectsRequest& request,
                                       const std::vector<std::string>& owners) {
  absl::Status s = store_->Pull(request);
  if (!s.ok()) return s;
  OutboxLock lock(&mu_, &outbox_);
  if (shut_down_) return absl::OkStatus();
  for (int i = 0; i < request.objects_size(); ++i) {
    ObjectId id = ObjectId::FromBinary(request.objects(i).object_id());
    const std::string& owner = i < static_cast<int>(owners.size()) ? owners[i] : owner_address_;
    if (owner.empty() || owner == owner_address_) {
      AddObjectLocationLocked(id, options_.node_address);
      continue;
    }
    // A reader's own entry lists this node now: its next Get reads in place.
    if (ObjectEntry* e = objects_.Find(id); e != nullptr && e->borrowed) {
      AddLocation(*e, options_.node_address);
    }
    auto notice = std::make_shared<proto::ObjectLocationNotice>();
    notice->set_object_id(id.Binary());
    *notice->mutable_node() = options_.node_address;
    outbox_.Run([this, owner = rpc::ParseAddress(owner), notice] {
      if (auto conn = pool_.Get(owner); conn.ok()) {
        (*conn)->SendOneWay(proto::ADD_OBJECT_LOCATION, *notice);
      }
    });
  }
  return absl::OkStatus();
}

absl::Status CoreWorker::AddBorrowerLocked(rpc::Connection& conn,
                                           const proto::BorrowerRequest& req) {
  ObjectId id = ObjectId::FromBinary(req.object_id());
  WorkerId borrower = WorkerId::FromBinary(req.borrower_worker_id());
  int count = std::max<int>(1, static_cast<int>(req.count()));
  auto not_owned = [&] {
    return absl::NotFoundError(
        absl::StrCat("object ", id.Hex(), " is not owned by this process (freed?)"));
  };
  if (!req.task_id().empty()) {
    if (!AddBorrowerOnBehalfLocked(id, borrower, req.borrower_address(), req.task_id(),
                                   req.attempt(), count)) {
      return not_owned();
    }
    return absl::OkStatus();
  }
  ObjectEntry* e = objects_.Find(id);
  if (e == nullptr || e->borrowed) return not_owned();
  if (req.self_registration() && borrower != options_.worker_id) {
    borrower_conns_[&conn].insert(borrower);
  }
  // The owner itself as borrower (its own ref came back inside a task result).
  for (int i = 0; i < count; ++i) {
    if (borrower == options_.worker_id) {
      objects_.AddLocalRef(id);
    } else {
      objects_.AddBorrower(id, borrower, 1);
    }
  }
  return absl::OkStatus();
}

void CoreWorker::OnObjectReady(const ObjectId& id, ObjectEntry& e) {
  if (e.remote_getters.empty()) return;
  proto::GetObjectReply reply;
  if (e.error) {
    *reply.mutable_error() = *e.error;
  } else if (e.in_store) {
    reply.set_in_store(true);
    for (const auto& a : e.locations) *reply.add_locations() = a;
  } else {
    reply.set_value(std::string(e.value.bytes));
    reply.set_format(static_cast<uint32_t>(e.value.format));
    reply.set_dtype(static_cast<uint32_t>(e.value.dtype));
  }
  outbox_.Run([getters = std::move(e.remote_getters), reply = std::move(reply)] {
    for (const auto& [conn, header] : getters) conn->Reply(header, reply);
  });
  e.remote_getters.clear();
  (void)id;
}

void CoreWorker::OnObjectFreed(const ObjectId& id, ObjectEntry& e) {
  if (e.borrowed) {
    if (e.owner_registrations > 0) {
      auto req = std::make_shared<proto::BorrowerRequest>();
      req->set_object_id(id.Binary());
      req->set_borrower_worker_id(options_.worker_id.Binary());
      req->set_count(static_cast<uint32_t>(e.owner_registrations));
      // Dropping a reference to an object whose owner exited is routine: nothing to say
      // when it cannot be reached.
      outbox_.Run([this, owner = rpc::ParseAddress(e.owner_address), req] {
        if (auto conn = pool_.Get(owner); conn.ok())
          (*conn)->SendOneWay(proto::REMOVE_BORROWER, *req);
      });
    }
    return;
  }
  // Copies on other nodes go with it (the primary, when a worker there made it).
  std::vector<proto::Address> remote;
  for (auto& a : e.locations) {
    if (a.node_id() != options_.node_address.node_id()) remote.push_back(std::move(a));
  }
  outbox_.Run([this, id, in_store = e.in_store, getters = std::move(e.remote_getters),
               remote = std::move(remote)] {
    if (in_store) store_->Delete(id);
    if (!remote.empty()) {
      proto::ObjectIdRequest req;
      req.set_object_id(id.Binary());
      for (const auto& node : remote) {
        if (auto conn = pool_.Get(node); conn.ok()) (*conn)->SendOneWay(proto::DELETE_OBJECT, req);
      }
    }
    for (const auto& [conn, header] : getters) {
      conn->ReplyError(header, absl::NotFoundError("object freed"));
    }
  });
  e.remote_getters.clear();
}

void CoreWorker::FetchBorrowedLocked(const ObjectId& id, ObjectEntry& e) {
  if (e.fetch_requested || e.ready) return;
  e.fetch_requested = true;
  auto fail = [this, id](const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    resolver_.OnObjectsReady(objects_.SetError(id, MakeError(proto::OWNER_DIED, why)));
    completions_.fetch_add(1, std::memory_order_release);
    ready_cv_.SignalAll();
  };
  outbox_.Run([this, id, fail, owner_id = e.owner_id, encoded = e.owner_address] {
    proto::Address owner = rpc::ParseAddress(encoded);
    auto conn = pool_.Get(owner);
    if (!conn.ok()) {
      OutboxLock lock(&mu_, &outbox_);
      if (shut_down_) return;
      fail(absl::StrCat("the owner of object ", id.Hex(), ", worker ", owner_id.Hex(),
                        ", died: its owner service (", rpc::DescribeAddress(owner),
                        ") is gone, and the object with it"));
      return;
    }
    proto::GetObjectRequest req;
    req.set_object_id(id.Binary());
    (*conn)->Call(
        proto::GET_OBJECT, req, [this, id, fail](const absl::StatusOr<std::string_view>& r) {
          OutboxLock lock(&mu_, &outbox_);
          if (shut_down_) return;
          proto::GetObjectReply reply;
          if (!r.ok() || !reply.ParseFromArray(r->data(), static_cast<int>(r->size()))) {
            fail(absl::StrCat("the owner of object ", id.Hex(), " went away: ",
                              r.ok() ? "malformed reply" : std::string(r.status().message())));
            return;
          }
          std::vector<TaskId> ready;
          if (reply.has_error()) {
            ready = objects_.SetError(
                id, std::make_shared<proto::ErrorInfo>(std::move(*reply.mutable_error())));
          } else if (reply.in_store()) {
            // Borrowed: the owner deletes it from the store, not us.
            ObjectEntry* e = objects_.Find(id);
            if (e == nullptr) return;
            e->locations.assign(std::make_move_iterator(reply.mutable_locations()->begin()),
                                std::make_move_iterator(reply.mutable_locations()->end()));
            ready = objects_.SetInStore(id);
          } else {
            auto bytes = std::make_shared<const std::string>(std::move(*reply.mutable_value()));
            ready = objects_.SetValue(
                id,
                internal::ValueView{static_cast<internal::ValueFormat>(reply.format()),
                                    static_cast<internal::DType>(reply.dtype()), *bytes, bytes});
          }
          completions_.fetch_add(1, std::memory_order_release);
          ready_cv_.SignalAll();
          resolver_.OnObjectsReady(ready);
        });
  });
}

internal::OwnerInfo CoreWorker::SerializeRef(const ObjectId& id) {
  internal::OwnerInfo info;
  {
    OutboxLock lock(&mu_, &outbox_);
    ObjectEntry* e = objects_.Find(id);
    if (e == nullptr) {
      throw ObjectLostError(
          absl::StrCat("cannot serialize ObjectRef ", id.Hex(), ": unknown in this process"));
    }
    info = e->borrowed ? internal::OwnerInfo{e->owner_id.Binary(), e->owner_address}
                       : internal::OwnerInfo{options_.worker_id.Binary(), owner_address_};
  }
  internal::RecordSerializedRef(id);  // may register a borrower (blocking): not under mu_
  return info;
}

void CoreWorker::DeserializeRef(const ObjectId& id, const internal::OwnerInfo& owner) {
  WorkerId owner_id = WorkerId::FromBinary(owner.owner_worker_id);
  {
    OutboxLock lock(&mu_, &outbox_);
    if (owner_id == options_.worker_id) {
      if (objects_.Find(id) == nullptr) {
        throw ObjectLostError(absl::StrCat("object ", id.Hex(), " was already freed"));
      }
      objects_.AddLocalRef(id);
      return;
    }
    if (!objects_.AddBorrowed(id, owner_id, owner.owner_address)) return;  // already borrowed
    objects_.Find(id)->owner_registrations = 1;
  }
  // First reference in this process: register as a borrower before the container (which
  // keeps the object alive meanwhile) can go away.
  auto conn = pool_.Get(rpc::ParseAddress(owner.owner_address));
  absl::Status s = conn.status();
  if (conn.ok()) {
    proto::BorrowerRequest req;
    req.set_object_id(id.Binary());
    req.set_borrower_worker_id(options_.worker_id.Binary());
    req.set_count(1);
    req.set_self_registration(true);
    s = rpc::CallSync(**conn, proto::ADD_BORROWER, req, config::control_rpc_timeout_ms()).status();
  }
  if (!s.ok()) {
    OutboxLock lock(&mu_, &outbox_);
    if (ObjectEntry* e = objects_.Find(id)) {
      e->owner_registrations = 0;
      // Unreachable owner: it died; NotFound: it already freed the object.
      objects_.SetError(
          id, MakeError(
                  s.code() == absl::StatusCode::kNotFound ? proto::OBJECT_LOST : proto::OWNER_DIED,
                  absl::StrCat("cannot borrow object ", id.Hex(), " from its owner, ",
                               DescribeOwner(owner.owner_address), ": ", s.message())));
      completions_.fetch_add(1, std::memory_order_release);
      ready_cv_.SignalAll();
    }
  }
}

absl::StatusOr<internal::OwnerInfo> CoreWorker::RegisterBorrowerFor(const ObjectId& id,
                                                                    const WorkerId& borrower,
                                                                    const proto::TaskSpec& spec,
                                                                    uint32_t attempt) {
  internal::OwnerInfo info;
  // The borrower is the task's caller: its owner service is the spec's caller address.
  const proto::Address& borrower_address = spec.caller_address();
  {
    OutboxLock lock(&mu_, &outbox_);
    ObjectEntry* e = objects_.Find(id);
    if (e == nullptr) return absl::NotFoundError(absl::StrCat("object ", id.Hex(), " is unknown"));
    if (!e->borrowed) {
      AddBorrowerOnBehalfLocked(id, borrower, borrower_address, spec.task_id(), attempt, 1);
      return internal::OwnerInfo{options_.worker_id.Binary(), owner_address_};
    }
    info = {e->owner_id.Binary(), e->owner_address};
  }
  auto conn = pool_.Get(rpc::ParseAddress(info.owner_address));
  if (!conn.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the object's owner cannot be reached: ", conn.status().message()));
  }
  proto::BorrowerRequest req;
  req.set_object_id(id.Binary());
  req.set_borrower_worker_id(borrower.Binary());
  req.set_count(1);
  req.set_task_id(spec.task_id());
  req.set_attempt(attempt);
  *req.mutable_borrower_address() = borrower_address;
  absl::Status s =
      rpc::CallSync(**conn, proto::ADD_BORROWER, req, config::control_rpc_timeout_ms()).status();
  if (!s.ok()) return s;
  return info;
}

bool CoreWorker::AddBorrowerOnBehalfLocked(const ObjectId& id, const WorkerId& borrower,
                                           const proto::Address& borrower_address,
                                           const std::string& task_id, uint32_t attempt,
                                           int count) {
  ObjectEntry* e = objects_.Find(id);
  if (e == nullptr || e->borrowed) return false;
  ObjectId task_return = MakeObjectId(TaskId::FromBinary(task_id), 1);
  bool added =
      objects_.AddBorrowerOnBehalf(id, borrower, options_.worker_id, task_return, attempt, count);
  // A borrower that is already gone would never drop its references: watch it.
  if (borrower != options_.worker_id) WatchBorrowerLocked(borrower, borrower_address);
  return added;
}

void CoreWorker::WatchBorrowerLocked(const WorkerId& borrower, const proto::Address& address) {
  if (borrower_watches_.count(borrower) != 0) return;
  borrower_watches_[borrower] = nullptr;  // being connected
  outbox_.Run([this, borrower, address] {
    auto conn = pool_.Get(address);
    OutboxLock lock(&mu_, &outbox_);
    auto it = borrower_watches_.find(borrower);
    if (it == borrower_watches_.end() || it->second != nullptr) return;
    if (!conn.ok() || (*conn)->closed()) {
      RAIO_LOG_DEBUG("borrower {} is gone ({}): dropping its references", borrower.Hex(),
                     conn.ok() ? "closed" : conn.status().message());
      borrower_watches_.erase(it);
      if (!shut_down_) objects_.RemoveBorrowerEverywhere(borrower);
      return;
    }
    it->second = *conn;
  });
}

void CoreWorker::OnPooledConnectionClosed(const std::shared_ptr<rpc::Connection>& conn) {
  OutboxLock lock(&mu_, &outbox_);
  for (auto it = borrower_watches_.begin(); it != borrower_watches_.end();) {
    if (it->second != conn) {
      ++it;
      continue;
    }
    WorkerId borrower = it->first;
    it = borrower_watches_.erase(it);
    if (!shut_down_) objects_.RemoveBorrowerEverywhere(borrower);
  }
}

}  // namespace worker
}  // namespace raio
