#include "raio/node/object_store_service.h"

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

bool ObjectStoreService::Handle(const std::shared_ptr<rpc::Connection>& conn, ClientId client,
                                const rpc::FrameHeader& h, std::string_view body) {
  auto reply_location = [&](const absl::StatusOr<ObjectLocation>& loc) {
    if (!loc.ok()) return conn->ReplyError(h, loc.status());
    proto::ObjectLocationReply reply;
    reply.set_offset(loc->offset);
    reply.set_size_bytes(loc->size);
    conn->Reply(h, reply);
  };
  auto parse = [&](google::protobuf::MessageLite& m) {
    if (m.ParseFromArray(body.data(), static_cast<int>(body.size()))) return true;
    RAIO_LOG_WARN("malformed object store request (method {}) from {}", h.method,
                  conn->peer_name());
    if (h.kind == rpc::FrameKind::kRequest) {
      conn->ReplyError(h, absl::InvalidArgumentError("malformed request body"));
    }
    return false;
  };
  switch (h.method) {
    case proto::CREATE_OBJECT: {
      proto::CreateObjectRequest req;
      if (!parse(req)) return true;
      ObjectId id = ObjectId::FromBinary(req.object_id());
      auto loc = store_->CreateObject(id, req.size_bytes(), client);
      if (loc.ok()) {
        WorkerId owner = WorkerId::FromBinary(req.owner_worker_id());
        owned_[owner].insert(id);
        owner_of_[id] = owner;
      }
      reply_location(loc);
      return true;
    }
    case proto::SEAL_OBJECT: {
      proto::ObjectIdRequest req;
      if (!parse(req)) return true;
      ObjectId id = ObjectId::FromBinary(req.object_id());
      absl::Status s = store_->Seal(id);
      if (!s.ok()) return conn->ReplyError(h, s), true;
      store_->Unpin(id, client);  // the creator's pin
      conn->Reply(h, proto::Empty());
      return true;
    }
    case proto::PIN_OBJECT: {
      proto::ObjectIdRequest req;
      if (!parse(req)) return true;
      ObjectId id = ObjectId::FromBinary(req.object_id());
      auto loc = store_->Pin(id, client);
      if (!loc.ok() && loc.status().code() == absl::StatusCode::kNotFound) {
        if (auto dead = dead_owner_of_.find(id); dead != dead_owner_of_.end()) {
          conn->ReplyError(h, absl::AbortedError(absl::StrCat(
                                  "object ", id.Hex(), " was deleted when its owner, worker ",
                                  dead->second.Hex(), ", died")));
          return true;
        }
      }
      reply_location(loc);
      return true;
    }
    case proto::UNPIN_OBJECT: {
      proto::ObjectIdRequest req;
      if (parse(req)) store_->Unpin(ObjectId::FromBinary(req.object_id()), client);
      return true;
    }
    case proto::DELETE_OBJECT: {
      proto::ObjectIdRequest req;
      if (parse(req)) Delete(ObjectId::FromBinary(req.object_id()));
      return true;
    }
    case proto::LIST_OBJECTS:
      conn->Reply(h, List());
      return true;
    default:
      return false;
  }
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

void ObjectStoreService::OnPeerGone(ClientId client, const WorkerId& owner) {
  store_->DisconnectClient(client);
  if (owner.IsNil()) return;
  auto it = owned_.find(owner);
  if (it == owned_.end()) return;
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
  }
  return list;
}

}  // namespace raio::node
