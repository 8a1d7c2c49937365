// Implementation of include/raio/placement_group.h: each call is one request to the local
// node, which forwards it to the head's PlacementGroupManager.
#include "raio/placement_group.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "raio/api/runtime_internal.h"
#include "raio/common/config.h"
#include "raio/common/ids.h"
#include "raio/common/placement_resources.h"
#include "raio/errors.h"
#include "raio/placement_group.pb.h"
#include "raio/raio.h"
#include "raio/rpc.pb.h"

namespace raio {
namespace internal {

// The zero-CPU task PlacementGroup::Ready places in the group.
bool RaioPlacementGroupReady() { return true; }

}  // namespace internal
}  // namespace raio

RAIO_REMOTE(raio::internal::RaioPlacementGroupReady);

namespace raio {
namespace {

[[noreturn]] void Throw(const std::string& call, const absl::Status& s) {
  std::string message = absl::StrCat(call, ": ", s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      throw InvalidUsageError(message);
    default:
      throw ClusterUnavailableError(message);
  }
}

template <typename Reply>
Reply Call(const char* call, proto::Method method, const google::protobuf::MessageLite& request,
           std::optional<std::chrono::milliseconds> timeout = config::control_rpc_timeout_ms()) {
  auto body = api::CoreOrThrow(call)->CallNode(method, request, timeout);
  if (!body.ok()) Throw(call, body.status());
  Reply reply;
  if (!reply.ParseFromString(*body))
    throw ClusterUnavailableError(absl::StrCat(call, ": malformed reply"));
  return reply;
}

PlacementGroupId ParseId(const char* call, const std::string& hex) {
  std::optional<PlacementGroupId> id = PlacementGroupIdFromHex(hex);
  if (!id) {
    throw InvalidUsageError(
        absl::StrCat(call, ": '", hex, "' is not a placement group id (16 hex digits)"));
  }
  return *id;
}

PlacementGroup FromInfo(const proto::PlacementGroupInfo& info) {
  std::vector<std::map<std::string, double>> bundles;
  for (const auto& b : info.bundles()) {
    bundles.emplace_back(b.resources().amounts().begin(), b.resources().amounts().end());
  }
  return PlacementGroup(PlacementGroupId::FromBinary(info.placement_group_id()).Hex(), info.name(),
                        std::move(bundles), static_cast<PlacementStrategy>(info.strategy()));
}

proto::PlacementGroupInfo InfoOf(const char* call, const std::string& hex) {
  proto::PlacementGroupRequest req;
  req.set_placement_group_id(ParseId(call, hex).Binary());
  return Call<proto::PlacementGroupInfo>(call, proto::GET_PLACEMENT_GROUP, req);
}

}  // namespace

namespace internal {
void CheckBundleIndex(const PlacementGroup& pg, int index) {
  if (pg.Empty()) {
    throw InvalidUsageError(
        "SetPlacementGroup: the placement group is empty (default-constructed)");
  }
  const int n = static_cast<int>(pg.GetBundles().size());
  if (index < -1 || index >= n) {
    throw InvalidUsageError(absl::StrCat(
        "SetPlacementGroup: bundle index ", index, " is not in placement group ", pg.GetID(),
        ", which has ", n, " bundle", n == 1 ? "" : "s", " (use 0..", n - 1, ", or -1 for any)"));
  }
}
}  // namespace internal

PlacementGroup CreatePlacementGroup(const PlacementGroupCreationOptions& options) {
  const char* call = "raio::CreatePlacementGroup";
  auto core = api::CoreOrThrow(call);
  if (options.bundles.empty()) {
    throw InvalidUsageError(absl::StrCat(call, ": a placement group needs at least one bundle"));
  }
  proto::PlacementGroupSpec spec;
  PlacementGroupId id = RandomId<PlacementGroupId>();
  spec.set_placement_group_id(id.Binary());
  spec.set_name(options.name);
  spec.set_namespace_(core->default_namespace());
  spec.set_strategy(static_cast<proto::PlacementStrategy>(options.strategy));
  spec.set_job_id(core->job_id());
  spec.set_detached(options.detached);
  for (std::size_t i = 0; i < options.bundles.size(); ++i) {
    if (options.bundles[i].empty()) {
      throw InvalidUsageError(absl::StrCat(call, ": bundle ", i, " has no resources"));
    }
    for (const auto& [name, amount] : options.bundles[i]) {
      if (!std::isfinite(amount) || amount <= 0) {
        throw InvalidUsageError(absl::StrCat(call, ": bundle ", i, ": ", name, ": ", amount,
                                             " (amounts must be finite and above 0)"));
      }
    }
    auto* b = spec.add_bundles();
    b->mutable_amounts()->insert(options.bundles[i].begin(), options.bundles[i].end());
  }
  return FromInfo(Call<proto::PlacementGroupInfo>(call, proto::CREATE_PLACEMENT_GROUP, spec));
}

void RemovePlacementGroup(const std::string& placement_group_id) {
  const char* call = "raio::RemovePlacementGroup";
  proto::PlacementGroupRequest req;
  req.set_placement_group_id(ParseId(call, placement_group_id).Binary());
  // The nodes end what runs in the group first; that can take a few worker exits.
  Call<proto::Empty>(call, proto::REMOVE_PLACEMENT_GROUP, req, std::nullopt);
}

PlacementGroup GetPlacementGroup(const std::string& name) {
  const char* call = "raio::GetPlacementGroup";
  auto core = api::CoreOrThrow(call);
  proto::PlacementGroupRequest req;
  req.set_name(name);
  req.set_namespace_(core->default_namespace());
  return FromInfo(Call<proto::PlacementGroupInfo>(call, proto::GET_PLACEMENT_GROUP, req));
}

PlacementGroup GetPlacementGroupById(const std::string& placement_group_id) {
  return FromInfo(InfoOf("raio::GetPlacementGroupById", placement_group_id));
}

std::vector<PlacementGroup> GetAllPlacementGroups() {
  auto list = Call<proto::PlacementGroupList>("raio::GetAllPlacementGroups",
                                              proto::LIST_PLACEMENT_GROUPS, proto::Empty());
  std::vector<PlacementGroup> out;
  for (const auto& info : list.groups()) out.push_back(FromInfo(info));
  return out;
}

PlacementGroupState PlacementGroup::GetState() const {
  return static_cast<PlacementGroupState>(InfoOf("PlacementGroup::GetState", id_).state());
}

std::vector<std::string> PlacementGroup::GetBundleNodes() const {
  std::vector<std::string> out;
  const proto::PlacementGroupInfo info = InfoOf("PlacementGroup::GetBundleNodes", id_);
  for (const auto& b : info.bundles()) {
    out.push_back(b.node_id());
  }
  return out;
}

bool PlacementGroup::Wait(int timeout_seconds) const {
  const char* call = "PlacementGroup::Wait";
  proto::WaitPlacementGroupRequest req;
  req.set_placement_group_id(ParseId(call, id_).Binary());
  const int64_t timeout_ms = std::max<int64_t>(0, int64_t{timeout_seconds} * 1000);
  req.set_timeout_ms(timeout_ms);
  auto info = Call<proto::PlacementGroupInfo>(
      call, proto::WAIT_PLACEMENT_GROUP, req,
      std::chrono::milliseconds(timeout_ms) + config::control_rpc_timeout_ms());
  if (info.state() == proto::PG_CREATED) return true;
  if (info.state() == proto::PG_REMOVED) {
    throw InvalidUsageError(absl::StrCat(call, ": placement group ", id_, " was ", info.message()));
  }
  // Infeasible while RESCHEDULING: it waits for a node to join (false at the timeout).
  if (info.infeasible() && info.state() == proto::PG_PENDING) {
    throw UnschedulableError(info.message());
  }
  return false;
}

ObjectRef<bool> PlacementGroup::Ready() const {
  return Task(internal::RaioPlacementGroupReady)
      .SetResources({{"CPU", 0}})
      .SetMaxRetries(0)
      .SetName("placement_group_ready")
      .SetPlacementGroup(*this, -1)
      .Remote();
}

}  // namespace raio
