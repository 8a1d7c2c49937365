// HeadService's placement group methods and the manager's way to the nodes (see
// placement_group_manager.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "raio/common/logging.h"
#include "raio/head/head_service.h"
#include "raio/rpc/connection_pool.h"

namespace raio::head {

void HeadService::PlacementGroupLinks::Send(proto::Method method, const std::string& node_id,
                                            const proto::BundlesRequest& request,
                                            std::function<void(absl::Status)> done) {
  auto it = head_.nodes_.find(node_id);
  if (it == head_.nodes_.end() || !it->second.conn) {
    head_.loop_.Post([done = std::move(done), node_id] {
      done(absl::UnavailableError(absl::StrCat("node ", node_id, " is not in the cluster")));
    });
    return;
  }
  auto reply = [done = std::move(done)](absl::StatusOr<proto::Empty> r) { done(r.status()); };
  rpc::Connection& conn = *it->second.conn;
  switch (method) {
    case proto::PREPARE_BUNDLES:
      rpc::Call<proto::PREPARE_BUNDLES>(conn, request, std::move(reply));
      return;
    case proto::COMMIT_BUNDLES:
      rpc::Call<proto::COMMIT_BUNDLES>(conn, request, std::move(reply));
      return;
    default:
      rpc::Call<proto::CANCEL_BUNDLES>(conn, request, std::move(reply));
      return;
  }
}

void HeadService::PlacementGroupLinks::RunAfter(std::chrono::milliseconds delay,
                                                std::function<void()> fn) {
  auto timer = std::make_shared<Timer>(head_.loop_.io());
  timer->expires_after(delay);
  timer->async_wait([timer, fn = std::move(fn), this](const boost::system::error_code& ec) {
    if (!ec && !head_.stopped_) fn();
  });
}

int64_t HeadService::PlacementGroupLinks::NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {
template <typename Responder, typename T>
void Answer(const Responder& r, const absl::StatusOr<T>& v) {
  if (v.ok()) {
    r.Ok(*v);
  } else {
    r.Error(v.status());
  }
}

absl::StatusOr<PlacementGroupId> IdOf(const std::string& bytes) {
  if (bytes.size() != PlacementGroupId::kSize) {
    return absl::InvalidArgumentError("a placement group id is 8 bytes");
  }
  return PlacementGroupId::FromBinary(bytes);
}
}  // namespace

void HeadService::RegisterPlacementGroupHandlers() {
  service_.Handle<proto::CREATE_PLACEMENT_GROUP>([this](const auto& r,
                                                        const proto::PlacementGroupSpec& spec) {
    if (NodeOf(*r.conn()).empty()) {
      r.Error(absl::FailedPreconditionError(
          "placement groups are created through a node: send CREATE_PLACEMENT_GROUP to "
          "the creator's node"));
      return;
    }
    if (jobs_.count(spec.job_id()) == 0) {
      r.Error(
          absl::FailedPreconditionError(absl::StrCat("no job ", spec.job_id(), " in the cluster")));
      return;
    }
    Answer(r, placement_groups_->Create(spec));
  });
  service_.Handle<proto::WAIT_PLACEMENT_GROUP>(
      [this](const auto& r, const proto::WaitPlacementGroupRequest& req) {
        auto id = IdOf(req.placement_group_id());
        if (!id.ok()) return r.Error(id.status());
        placement_groups_->Wait(
            *id, std::chrono::milliseconds(std::max<int64_t>(0, req.timeout_ms())),
            [r](absl::StatusOr<proto::PlacementGroupInfo> info) { Answer(r, info); });
      });
  service_.Handle<proto::REMOVE_PLACEMENT_GROUP>(
      [this](const auto& r, const proto::PlacementGroupRequest& req) {
        auto id = IdOf(req.placement_group_id());
        if (!id.ok()) return r.Error(id.status());
        RemovePlacementGroup(*id, "by RemovePlacementGroup", [r](absl::Status s) {
          if (s.ok()) {
            r.Ok(proto::Empty());
          } else {
            r.Error(s);
          }
        });
      });
  service_.Handle<proto::GET_PLACEMENT_GROUP>(
      [this](const auto& r, const proto::PlacementGroupRequest& req) {
        if (req.placement_group_id().empty()) {
          return Answer(r, placement_groups_->GetNamed(req.namespace_(), req.name()));
        }
        auto id = IdOf(req.placement_group_id());
        if (!id.ok()) return r.Error(id.status());
        Answer(r, placement_groups_->Get(*id));
      });
  service_.Handle<proto::LIST_PLACEMENT_GROUPS>(
      [this](const auto& r, const proto::Empty&) { r.Ok(placement_groups_->List()); });
}

void HeadService::RemovePlacementGroup(const PlacementGroupId& id, const std::string& cause,
                                       std::function<void(absl::Status)> done) {
  placement_groups_->Remove(id, cause, [this, id, cause, done = std::move(done)](absl::Status s) {
    if (s.ok()) {
      actors_->OnPlacementGroupRemoved(
          id.Binary(), absl::StrCat("placement group ", id.Hex(), " was removed: ", cause));
    }
    ScheduleBroadcast();  // the nodes fail the leases still queued for it
    done(s);
  });
}

}  // namespace raio::head
