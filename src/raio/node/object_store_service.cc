#include "raio/node/object_store_service.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/rpc.pb.h"

namespace raio::node {

absl::StatusOr<std::unique_ptr<ObjectStoreService>> ObjectStoreService::Create(
    uint64_t capacity_bytes, const std::string& spill_dir, uint64_t prefault_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(spill_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", spill_dir, ": ", ec.message()));
  ObjectStore::Options options;
  options.capacity_bytes = capacity_bytes;
  options.spill_dir = spill_dir;
  options.prefault_bytes = prefault_bytes;
  auto store = ObjectStore::Create(options);
  if (!store.ok()) return store.status();
  return std::unique_ptr<ObjectStoreService>(new ObjectStoreService(std::move(*store)));
}

void ObjectStoreService::RegisterHandlers(rpc::Service& service, ClientOf client_of) {
  service.Handle<proto::CREATE_OBJECT>(
      [this, client_of](const rpc::Responder<proto::CREATE_OBJECT>& r,
                        proto::CreateObjectRequest& req) {
        const auto deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(req.wait_ms());
        PendingCreate p{r.conn(), r.header(), client_of(*r.conn()), std::move(req),
                        deadline, nullptr,    CopyKind::kPrimary};
        if (!TryCreate(p, /*final=*/p.request.wait_ms() == 0)) {
          pending_creates_.push_back(std::move(p));
        }
      });
  service.Handle<proto::SEAL_OBJECT>([this, client_of](const rpc::Responder<proto::SEAL_OBJECT>& r,
                                                       const proto::ObjectIdRequest& req) {
    ObjectId id = ObjectId::FromBinary(req.object_id());
    absl::Status s = store_->Seal(id);
    if (!s.ok()) return r.Error(s);
    store_->Unpin(id, client_of(*r.conn()));  // the creator's pin
    r.Ok(proto::Empty());
    RetryPendingPins();
  });
  service.Handle<proto::PIN_OBJECT>([this, client_of](const rpc::Responder<proto::PIN_OBJECT>& r,
                                                      const proto::ObjectIdRequest& req) {
    ObjectId id = ObjectId::FromBinary(req.object_id());
    auto loc = store_->Pin(id, client_of(*r.conn()));
    if (!loc.ok()) return r.Error(PinError(id, loc.status()));
    proto::ObjectLocationReply reply;
    reply.set_offset(loc->offset);
    reply.set_size_bytes(loc->size);
    r.Ok(reply);
  });
  service.Handle<proto::PIN_OBJECTS>([this, client_of](const rpc::Responder<proto::PIN_OBJECTS>& r,
                                                       const proto::PinObjectsRequest& req) {
    PendingPins p{r.conn(), r.header(), client_of(*r.conn()), {}, std::chrono::steady_clock::now()};
    for (const auto& id : req.object_ids()) p.ids.push_back(ObjectId::FromBinary(id));
    if (!TryPinAll(p)) pending_pins_.push_back(std::move(p));
  });
  service.Handle<proto::UNPIN_OBJECT>(
      [this, client_of](const rpc::Responder<proto::UNPIN_OBJECT>& r,
                        const proto::ObjectIdRequest& req) {
        store_->Unpin(ObjectId::FromBinary(req.object_id()), client_of(*r.conn()));
        RetryPendingPins();
      });
  service.Handle<proto::DELETE_OBJECT>(
      [this](const rpc::Responder<proto::DELETE_OBJECT>&, const proto::ObjectIdRequest& req) {
        Delete(ObjectId::FromBinary(req.object_id()));
        RetryPendingPins();
      });
  service.Handle<proto::LIST_OBJECTS>(
      [this](const rpc::Responder<proto::LIST_OBJECTS>& r, const proto::Empty&) { r.Ok(List()); });
}

void ObjectStoreService::Delete(const ObjectId& id) {
  store_->Delete(id);
  auto it = owner_of_.find(id);
  if (it == owner_of_.end()) return;
  auto owned = owned_.find(it->second);
  if (owned != owned_.end()) {
    owned->second.erase(id);
    if (owned->second.empty()) owned_.erase(owned);
  }
  owner_of_.erase(it);
}

absl::Status ObjectStoreService::PinError(const ObjectId& id, const absl::Status& status) const {
  if (status.code() != absl::StatusCode::kNotFound) return status;
  auto dead = dead_owner_of_.find(id);
  if (dead == dead_owner_of_.end()) return status;
  return absl::AbortedError(absl::StrCat(
      "object ", id.Hex(), " was deleted when its owner, worker ", dead->second.Hex(), ", died"));
}

bool ObjectStoreService::TryCreate(PendingCreate& p, bool final) {
  ObjectId id = ObjectId::FromBinary(p.request.object_id());
  auto loc = store_->CreateObject(id, p.request.size_bytes(), p.client, p.kind);
  if (p.done) {  // the node's own: waits for room for as long as it takes
    const bool never_fits = p.request.size_bytes() > store_->capacity_bytes();
    if (!loc.ok() && loc.status().code() == absl::StatusCode::kResourceExhausted && !never_fits) {
      return false;
    }
    if (!loc.ok() && never_fits) {
      loc = absl::ResourceExhaustedError(absl::StrCat(
          "object ", id.Hex(), " of ", p.request.size_bytes(),
          " bytes can never fit this node's object store of ", store_->capacity_bytes(), " bytes"));
    }
    CreateCallback done = std::move(p.done);
    done(std::move(loc));
    return true;
  }
  if (!loc.ok()) {
    // No room now, but there could be once readers unpin (larger than the store is refused
    // by the client before it asks): wait, unless the wait is over.
    bool may_fit = p.request.size_bytes() <= store_->capacity_bytes();
    if (loc.status().code() == absl::StatusCode::kResourceExhausted && may_fit && !final) {
      return false;
    }
    absl::Status s = loc.status();
    if (s.code() == absl::StatusCode::kResourceExhausted && p.request.wait_ms() > 0) {
      s = absl::ResourceExhaustedError(absl::StrCat(
          s.message(), "; waited ", p.request.wait_ms(),
          " ms for room (objects pinned by running tasks and views hold it; "
          "object_store_full_wait_ms, RAIO_OBJECT_STORE_FULL_WAIT_MS, sets the wait)"));
    }
    p.conn->ReplyError(p.header, s);
    return true;
  }
  WorkerId owner = WorkerId::FromBinary(p.request.owner_worker_id());
  owned_[owner].insert(id);
  owner_of_[id] = owner;
  proto::ObjectLocationReply reply;
  reply.set_offset(loc->offset);
  reply.set_size_bytes(loc->size);
  p.conn->Reply(p.header, reply);
  return true;
}

bool ObjectStoreService::TryPinAll(PendingPins& p) {
  // Sizes first: arguments that can never fit together fail now, with every size.
  uint64_t total = 0;
  std::string sizes;
  for (const auto& id : p.ids) {
    std::optional<uint64_t> size = store_->SizeOf(id);
    if (!size) {
      p.conn->ReplyError(p.header,
                         PinError(id, absl::NotFoundError(absl::StrCat("no object ", id.Hex()))));
      return true;
    }
    total += (*size + 63) / 64 * 64;  // as allocated
    absl::StrAppend(&sizes, sizes.empty() ? "" : ", ", *size);
  }
  if (total > store_->capacity_bytes()) {
    p.conn->ReplyError(
        p.header, absl::ResourceExhaustedError(absl::StrCat(
                      p.ids.size(), " objects of ", sizes, " bytes with their headers (", total,
                      " bytes in all) must be in the object store at once, above its "
                      "capacity of ",
                      store_->capacity_bytes(), " bytes: they can never fit together")));
    return true;
  }
  proto::PinObjectsReply reply;
  std::vector<ObjectId> pinned;
  for (const auto& id : p.ids) {
    auto loc = store_->Pin(id, p.client);
    if (!loc.ok()) {
      for (const auto& done : pinned) store_->Unpin(done, p.client);
      if (loc.status().code() == absl::StatusCode::kResourceExhausted) {
        if (!p.warned && std::chrono::steady_clock::now() - p.since > std::chrono::seconds(10)) {
          p.warned = true;
          RAIO_LOG_WARN(
              "a task has waited over 10 s for {} bytes of arguments to fit in the "
              "object store: {}",
              total, loc.status().message());
        }
        return false;  // wait for room
      }
      p.conn->ReplyError(p.header, PinError(id, loc.status()));
      return true;
    }
    pinned.push_back(id);
    auto* l = reply.add_locations();
    l->set_offset(loc->offset);
    l->set_size_bytes(loc->size);
  }
  p.conn->Reply(p.header, reply);
  return true;
}

void ObjectStoreService::RetryPendingPins() {
  if (!pending_pins_.empty()) {
    std::deque<PendingPins> waiting;
    waiting.swap(pending_pins_);
    for (auto& p : waiting) {
      if (p.conn->closed() || !TryPinAll(p)) {
        if (!p.conn->closed()) pending_pins_.push_back(std::move(p));
      }
    }
  }
  if (!pending_creates_.empty()) {
    const auto now = std::chrono::steady_clock::now();
    std::deque<PendingCreate> waiting;
    waiting.swap(pending_creates_);
    for (auto& p : waiting) {
      if (p.conn && p.conn->closed()) continue;
      if (!TryCreate(p, /*final=*/now >= p.deadline)) pending_creates_.push_back(std::move(p));
    }
  }
}

void ObjectStoreService::OnPeerGone(ClientId client, const WorkerId& owner) {
  store_->DisconnectClient(client);
  // Its waiting requests go; its pins and objects may make room for others'.
  pending_pins_.erase(std::remove_if(pending_pins_.begin(), pending_pins_.end(),
                                     [client](const PendingPins& p) { return p.client == client; }),
                      pending_pins_.end());
  pending_creates_.erase(
      std::remove_if(pending_creates_.begin(), pending_creates_.end(),
                     [client](const PendingCreate& p) { return p.client == client; }),
      pending_creates_.end());
  if (auto it = owner.IsNil() ? owned_.end() : owned_.find(owner); it != owned_.end()) {
    std::set<ObjectId> ids = std::move(it->second);
    owned_.erase(it);
    for (const auto& id : ids) {
      store_->Delete(id);
      owner_of_.erase(id);
      // Remembered (boundedly), so that a later reader learns the owner died.
      if (dead_owner_of_.emplace(id, owner).second) dead_order_.push_back(id);
      if (dead_order_.size() > kMaxRememberedDeadOwnerObjects) {
        dead_owner_of_.erase(dead_order_.front());
        dead_order_.pop_front();
      }
    }
  }
  RetryPendingPins();
}

void ObjectStoreService::CreateForNode(const ObjectId& id, uint64_t size_bytes, CopyKind kind,
                                       CreateCallback done) {
  PendingCreate p;
  p.client = kNodeClient;
  p.request.set_object_id(id.Binary());
  p.request.set_size_bytes(size_bytes);
  p.deadline = std::chrono::steady_clock::time_point::max();
  p.done = std::move(done);
  p.kind = kind;
  if (!TryCreate(p, /*final=*/false)) pending_creates_.push_back(std::move(p));
}

void ObjectStoreService::CancelCreateForNode(const ObjectId& id) {
  const std::string key = id.Binary();
  pending_creates_.erase(std::remove_if(pending_creates_.begin(), pending_creates_.end(),
                                        [&key](const PendingCreate& p) {
                                          return p.done && p.request.object_id() == key;
                                        }),
                         pending_creates_.end());
}

absl::Status ObjectStoreService::SealForNode(const ObjectId& id) {
  absl::Status s = store_->Seal(id);
  if (!s.ok()) return s;
  store_->Unpin(id, kNodeClient);  // the creator's pin
  RetryPendingPins();
  return absl::OkStatus();
}

void ObjectStoreService::AbortCreateForNode(const ObjectId& id) {
  if (store_->StateOf(id) != ObjectState::kUnsealed) return;
  store_->Unpin(id, kNodeClient);
  store_->Delete(id);
  RetryPendingPins();
}

absl::StatusOr<ObjectLocation> ObjectStoreService::PinForNode(const ObjectId& id) {
  if (store_->StateOf(id) == ObjectState::kUnsealed) {
    return absl::NotFoundError(absl::StrCat("object ", id.Hex(), " is not sealed here yet"));
  }
  auto loc = store_->Pin(id, kNodeClient);
  if (!loc.ok()) return PinError(id, loc.status());
  return loc;
}

void ObjectStoreService::UnpinForNode(const ObjectId& id) {
  store_->Unpin(id, kNodeClient);
  RetryPendingPins();
}

void ObjectStoreService::DeleteObject(const ObjectId& id) {
  Delete(id);
  RetryPendingPins();
}

bool ObjectStoreService::HasSealed(const ObjectId& id) const {
  std::optional<ObjectState> state = store_->StateOf(id);
  return state == ObjectState::kSealed || state == ObjectState::kSpilled;
}

void ObjectStoreService::FillStats(proto::ObjectStoreStats* out) const {
  ObjectStoreStats s = store_->stats();
  out->set_capacity_bytes(s.capacity_bytes);
  out->set_used_bytes(s.used_bytes);
  out->set_pinned_bytes(s.pinned_bytes);
  out->set_num_objects(s.num_objects);
  out->set_num_spilled(s.num_spilled);
  out->set_spilled_bytes(s.spilled_bytes);
}

proto::ObjectList ObjectStoreService::List() const {
  proto::ObjectList list;
  for (const auto& info : store_->List()) {
    auto* o = list.add_objects();
    o->set_object_id(info.id.Binary());
    o->set_size_bytes(info.size);
    o->set_state(ObjectStateName(info.state));
    o->set_pins(info.num_pins);
    o->set_node_id(node_id_hex_);
    o->set_secondary(info.kind == CopyKind::kSecondary);
  }
  return list;
}

}  // namespace raio::node
