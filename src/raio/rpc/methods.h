// The table of raio's RPC methods, declared once: for each method, its request and reply
// types, whether it is one-way, whether a retry after a lost reply is safe (idempotent),
// and the deadline a caller uses unless it says otherwise (kControl: config's
// control_rpc_timeout_ms, read at each call; kWaits: as long as the connection lives, for
// methods that wait by design: a lease, a task, an object).
// Services dispatch by this table (rpc::Service), clients call through it (rpc::Call),
// so a method's types cannot disagree between the two sides.
// Thread-safety: constant data.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "raio/actor.pb.h"
#include "raio/common/config.h"
#include "raio/head.pb.h"
#include "raio/node.pb.h"
#include "raio/owner.pb.h"
#include "raio/placement_group.pb.h"
#include "raio/rpc.pb.h"
#include "raio/task.pb.h"

namespace raio::rpc {

enum class CallKind : uint8_t { kUnary, kOneWay };
enum class DeadlineKind : uint8_t { kControl, kWaits };

struct MethodInfo {
  proto::Method method = proto::METHOD_UNSPECIFIED;
  std::string_view name;
  CallKind kind = CallKind::kUnary;
  bool idempotent = false;
  DeadlineKind deadline = DeadlineKind::kControl;
};

// The deadline a call of `method` gets by default: control_rpc_timeout_ms for control
// methods, none for those that wait by design.
inline std::optional<std::chrono::milliseconds> DefaultDeadline(const MethodInfo& method) {
  if (method.deadline == DeadlineKind::kWaits) return std::nullopt;
  return config::control_rpc_timeout_ms();
}

// X(method, request type, reply type, kind, idempotent, deadline)
#define RAIO_RPC_METHODS(X)                                                                        \
  /* head */                                                                                       \
  X(REGISTER_NODE, RegisterNodeRequest, RegisterNodeReply, kUnary, false, kControl)                \
  X(REGISTER_JOB, RegisterJobRequest, RegisterJobReply, kUnary, false, kControl)                   \
  X(GET_CLUSTER_STATUS, Empty, ClusterStatus, kUnary, true, kControl)                              \
  X(LIST_CLUSTER_OBJECTS, Empty, ObjectList, kUnary, true, kControl)                               \
  X(LIST_CLUSTER_ACTORS, Empty, ActorList, kUnary, true, kControl)                                 \
  X(SHUTDOWN_CLUSTER, ShutdownClusterRequest, Empty, kUnary, true, kControl)                       \
  X(LIST_NODES, Empty, NodeList, kUnary, true, kControl)                                           \
  X(REPORT_RESOURCES, ResourceReport, Empty, kOneWay, true, kControl)                              \
  X(GET_JOB_INFO, GetJobInfoRequest, JobConfigInfo, kUnary, true, kControl)                        \
  /* node */                                                                                       \
  X(REGISTER_DRIVER, RegisterDriverRequest, RegisterDriverReply, kUnary, false, kControl)          \
  X(REGISTER_WORKER, RegisterWorkerRequest, RegisterWorkerReply, kUnary, false, kControl)          \
  X(REQUEST_WORKER_LEASE, RequestWorkerLeaseRequest, RequestWorkerLeaseReply, kUnary, false,       \
    kWaits)                                                                                        \
  X(RETURN_WORKER_LEASE, LeaseIdRequest, Empty, kUnary, true, kControl)                            \
  X(CANCEL_WORKER_LEASE, LeaseIdRequest, Empty, kUnary, true, kControl)                            \
  X(KILL_LEASED_WORKER, LeaseIdRequest, Empty, kUnary, true, kControl)                             \
  X(NOTIFY_BLOCKED, NotifyBlockedRequest, Empty, kOneWay, false, kControl)                         \
  X(NOTIFY_UNBLOCKED, NotifyBlockedRequest, Empty, kOneWay, false, kControl)                       \
  X(GET_NODE_STATS, Empty, NodeStats, kUnary, true, kControl)                                      \
  X(UPDATE_CLUSTER_VIEW, ClusterViewUpdate, Empty, kOneWay, true, kControl)                        \
  X(JOB_FINISHED, JobFinished, Empty, kOneWay, true, kControl)                                     \
  X(LEASE_INFEASIBLE, LeaseInfeasibleNotice, Empty, kOneWay, true, kControl)                       \
  X(GET_WORKER_FAILURE_CAUSE, GetWorkerFailureCauseRequest, WorkerFailureCause, kUnary, true,      \
    kControl)                                                                                      \
  /* object store (node) */                                                                        \
  X(CREATE_OBJECT, CreateObjectRequest, ObjectLocationReply, kUnary, false, kWaits)                \
  X(SEAL_OBJECT, ObjectIdRequest, Empty, kUnary, false, kControl)                                  \
  X(PIN_OBJECT, ObjectIdRequest, ObjectLocationReply, kUnary, false, kControl)                     \
  X(PIN_OBJECTS, PinObjectsRequest, PinObjectsReply, kUnary, false, kWaits)                        \
  X(UNPIN_OBJECT, ObjectIdRequest, Empty, kOneWay, false, kControl)                                \
  X(DELETE_OBJECT, ObjectIdRequest, Empty, kOneWay, true, kControl)                                \
  X(LIST_OBJECTS, Empty, ObjectList, kUnary, true, kControl)                                       \
  /* object transfer (node -> node) */                                                             \
  X(READ_OBJECT_CHUNK, ReadObjectChunkRequest, ReadObjectChunkReply, kUnary, true, kControl)       \
  X(PULL_OBJECTS, PullObjectsRequest, Empty, kUnary, true, kWaits)                                 \
  /* owner service (every driver and worker) */                                                    \
  X(ADD_BORROWER, BorrowerRequest, Empty, kUnary, false, kControl)                                 \
  X(REMOVE_BORROWER, BorrowerRequest, Empty, kOneWay, false, kControl)                             \
  X(GET_OBJECT, GetObjectRequest, GetObjectReply, kUnary, true, kWaits)                            \
  X(ADD_OBJECT_LOCATION, ObjectLocationNotice, Empty, kOneWay, true, kControl)                     \
  /* actors (node) */                                                                              \
  X(CREATE_ACTOR, CreateActorRequest, ActorInfo, kUnary, false, kControl)                          \
  X(WAIT_ACTOR, WaitActorRequest, ActorInfo, kUnary, true, kWaits)                                 \
  X(GET_NAMED_ACTOR, GetNamedActorRequest, ActorInfo, kUnary, true, kControl)                      \
  X(KILL_ACTOR, KillActorRequest, Empty, kUnary, true, kControl)                                   \
  X(LIST_ACTORS, Empty, ActorList, kUnary, true, kControl)                                         \
  X(CREATE_ACTOR_INSTANCE, CreateActorInstanceRequest, CreateActorInstanceReply, kUnary, false,    \
    kWaits)                                                                                        \
  /* actors (head <-> node) */                                                                     \
  X(PLACE_ACTOR, PlaceActorRequest, PlaceActorReply, kUnary, false, kControl)                      \
  X(REPORT_ACTOR_STATE, ActorInfo, Empty, kOneWay, true, kControl)                                 \
  X(KILL_LOCAL_ACTOR, KillActorRequest, Empty, kUnary, true, kControl)                             \
  /* job packages (head) */                                                                        \
  X(STAT_PACKAGE, StatPackageRequest, StatPackageReply, kUnary, true, kControl)                    \
  X(UPLOAD_PACKAGE_CHUNK, UploadPackageChunkRequest, Empty, kUnary, false, kControl)               \
  X(FETCH_PACKAGE_CHUNK, FetchPackageChunkRequest, FetchPackageChunkReply, kUnary, true, kControl) \
  /* node failure */                                                                               \
  X(HEALTH_CHECK, Empty, Empty, kUnary, true, kControl)                                            \
  X(NODE_REMOVED, NodeRemovedNotice, Empty, kOneWay, true, kControl)                               \
  /* placement groups */                                                                           \
  X(CREATE_PLACEMENT_GROUP, PlacementGroupSpec, PlacementGroupInfo, kUnary, false, kControl)       \
  X(WAIT_PLACEMENT_GROUP, WaitPlacementGroupRequest, PlacementGroupInfo, kUnary, true, kWaits)     \
  X(REMOVE_PLACEMENT_GROUP, PlacementGroupRequest, Empty, kUnary, true, kControl)                  \
  X(GET_PLACEMENT_GROUP, PlacementGroupRequest, PlacementGroupInfo, kUnary, true, kControl)        \
  X(LIST_PLACEMENT_GROUPS, Empty, PlacementGroupList, kUnary, true, kControl)                      \
  X(PREPARE_BUNDLES, BundlesRequest, Empty, kUnary, false, kControl)                               \
  X(COMMIT_BUNDLES, BundlesRequest, Empty, kUnary, true, kControl)                                 \
  X(CANCEL_BUNDLES, BundlesRequest, Empty, kUnary, true, kControl)                                 \
  /* workers */                                                                                    \
  X(PUSH_TASK, PushTaskRequest, PushTaskReply, kUnary, false, kWaits)                              \
  X(PUSH_ACTOR_TASK, PushActorTaskRequest, PushTaskReply, kUnary, false, kWaits)                   \
  X(EXIT_WORKER, Empty, Empty, kOneWay, true, kControl)

// MethodTraits<M>: Request, Reply and kInfo of method M.
template <proto::Method M>
struct MethodTraits;

#define RAIO_RPC_DECLARE_TRAITS(method, request, reply, kind, idempotent, deadline)       \
  template <>                                                                             \
  struct MethodTraits<proto::method> {                                                    \
    using Request = proto::request;                                                       \
    using Reply = proto::reply;                                                           \
    static constexpr MethodInfo kInfo{proto::method, #method, CallKind::kind, idempotent, \
                                      DeadlineKind::deadline};                            \
  };
RAIO_RPC_METHODS(RAIO_RPC_DECLARE_TRAITS)
#undef RAIO_RPC_DECLARE_TRAITS

// The table entry of method number `method`; nullptr when raio has no such method.
const MethodInfo* FindMethod(uint32_t method);

}  // namespace raio::rpc
