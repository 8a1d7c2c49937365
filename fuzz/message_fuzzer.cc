// message_fuzzer: the body of a control-plane frame, parsed as the protobuf message its
// method names and then put through the checks the receiving daemon or worker runs
// before acting on it: resource demands (ResourceSet::FromProto, then a node's
// LocalResourceManager::CheckFeasible / TryAllocate / Release), ids (FromBinary), task
// arguments resolved and joined as the worker does (worker::AppendAsMsgpack) and decoded
// as a remote function's parameters, values in replies decoded as ObjectRef::Get would.
//
// Input: byte 0 picks the message (kMessages below, modulo its size), the rest is the
// body. A body that does not parse is answered with an error by the daemons and needs
// no further check.
#include <google/protobuf/stubs/logging.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "decode_values.h"
#include "raio/actor.pb.h"
#include "raio/common.pb.h"
#include "raio/common/ids.h"
#include "raio/common/resources.h"
#include "raio/head.pb.h"
#include "raio/node.pb.h"
#include "raio/node/scheduler/local_resource_manager.h"
#include "raio/owner.pb.h"
#include "raio/task.pb.h"
#include "raio/worker/value_codec.h"

namespace raio::fuzz {
namespace {

#define FUZZ_EXPECT(cond)                                                                       \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      std::fprintf(stderr, "message_fuzzer: expectation failed: %s (%s:%d)\n", #cond, __FILE__, \
                   __LINE__);                                                                   \
      std::abort();                                                                             \
    }                                                                                           \
  } while (0)

template <typename M>
bool Parse(std::string_view body, M* m) {
  return m->ParseFromArray(body.data(), static_cast<int>(body.size()));
}

// What a node or the head does with a peer's resource demand or node total.
void CheckResources(const proto::ResourceSet& p) {
  auto set = ResourceSet::FromProto(p);
  if (!set.ok()) {
    FUZZ_EXPECT(set.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  (void)set->ToString();  // in INFEASIBLE replies and logs
  (void)set->Key();
  for (const auto& [name, fixed] : set->fixed()) {
    FUZZ_EXPECT(!name.empty() && fixed > 0);
  }
  // FromProto(ToProto(x)) == x: what the head and nodes send on is what they accepted.
  proto::ResourceSet again;
  set->ToProto(&again);
  auto round_trip = ResourceSet::FromProto(again);
  FUZZ_EXPECT(round_trip.ok() && *round_trip == *set);

  static const ResourceSet kNodeTotal =
      *ResourceSet::FromMap({{"CPU", 8}, {"GPU", 2}, {"memory", 16.0 * (1 << 30)}, {"custom", 3}});
  node::LocalResourceManager node(kNodeTotal);
  if (!node.CheckFeasible(*set).ok()) return;
  auto first = node.TryAllocate(*set);
  auto second = node.TryAllocate(*set);
  if (second) node.Release(*second);
  if (first) {
    node.LendCpu(*first);
    node.ReclaimCpu(*first);
    node.Release(*first);
  }
  FUZZ_EXPECT(node.available() == kNodeTotal);  // every allocation given back
}

template <typename Id>
void CheckId(const std::string& bytes) {
  Id id = Id::FromBinary(bytes);
  FUZZ_EXPECT(bytes.size() == Id::kSize ? id.Binary() == bytes : id.IsNil());
  (void)id.Hex();
}

// TaskExecutor::ResolveArg for arguments that carry their value (in-store arguments are
// read from the node's store instead), then the parameter decoding of the invoker.
internal::ValueView Resolve(const proto::TaskArg& arg, std::shared_ptr<std::string>* keep,
                            bool* ok) {
  if (arg.kind_case() == proto::TaskArg::kList) {
    auto joined = std::make_shared<std::string>();
    worker::AppendMsgpackArrayHeader(joined.get(),
                                     static_cast<uint32_t>(arg.list().elements_size()));
    for (const auto& element : arg.list().elements()) {
      std::shared_ptr<std::string> element_keep;
      internal::ValueView v = Resolve(element, &element_keep, ok);
      if (!*ok || !worker::AppendAsMsgpack(v, joined.get()).ok()) {
        *ok = false;
        return {};
      }
    }
    *keep = joined;
    return {internal::ValueFormat::kMsgpack, internal::DType::kNone, *joined, joined};
  }
  if (arg.in_store()) {
    CheckId<ObjectId>(arg.object_id());
    *ok = false;
    return {};
  }
  return {static_cast<internal::ValueFormat>(arg.format()),
          static_cast<internal::DType>(arg.dtype()), arg.value(), nullptr};
}

void CheckTaskSpec(const proto::TaskSpec& spec) {
  CheckId<TaskId>(spec.task_id());
  CheckId<WorkerId>(spec.owner_worker_id());
  (void)MakeObjectId(TaskId::FromBinary(spec.task_id()), 1);
  for (const auto& arg : spec.args()) {
    std::shared_ptr<std::string> keep;
    bool ok = true;
    internal::ValueView v = Resolve(arg, &keep, &ok);
    if (ok) DecodeAsCommonTypes(v);
  }
}

void CheckValue(const std::string& bytes, uint32_t format, uint32_t dtype) {
  DecodeAsCommonTypes({static_cast<internal::ValueFormat>(format),
                       static_cast<internal::DType>(dtype), bytes, nullptr});
}

void CheckActorSpec(const proto::ActorSpec& spec) {
  CheckId<ActorId>(spec.actor_id());
  CheckId<WorkerId>(spec.owner_worker_id());
  CheckResources(spec.resources());
  proto::TaskSpec as_task;
  *as_task.mutable_args() = spec.args();
  CheckTaskSpec(as_task);
}

using Check = std::function<void(std::string_view)>;

template <typename M>
Check Parsed(std::function<void(const M&)> check) {
  return [check](std::string_view body) {
    M m;
    if (!Parse(body, &m)) return;
    check(m);
    // A parsed message serializes again (the daemons forward specs and echo ids).
    std::string out;
    FUZZ_EXPECT(m.SerializeToString(&out));
  };
}

// One entry per message a peer can send: requests the head, nodes, owners and workers
// serve, and the replies their clients parse.
const std::vector<Check>& Messages() {
  static const std::vector<Check> kMessages = {
      // head
      Parsed<proto::RegisterNodeRequest>([](const auto& m) {
        if (!m.node_id().empty() && !m.address().unix_socket().empty()) CheckResources(m.total());
      }),
      Parsed<proto::RegisterJobRequest>([](const auto&) {}),
      // node
      Parsed<proto::RegisterDriverRequest>([](const auto& m) { CheckId<WorkerId>(m.worker_id()); }),
      Parsed<proto::RegisterWorkerRequest>([](const auto& m) { CheckId<WorkerId>(m.worker_id()); }),
      Parsed<proto::RequestWorkerLeaseRequest>([](const auto& m) {
        CheckResources(m.demand());
        CheckId<LeaseId>(m.lease_id());
      }),
      Parsed<proto::LeaseIdRequest>([](const auto& m) { CheckId<LeaseId>(m.lease_id()); }),
      Parsed<proto::NotifyBlockedRequest>([](const auto&) {}),
      Parsed<proto::CreateObjectRequest>([](const auto& m) {
        CheckId<ObjectId>(m.object_id());
        CheckId<WorkerId>(m.owner_worker_id());
      }),
      Parsed<proto::ObjectIdRequest>([](const auto& m) { CheckId<ObjectId>(m.object_id()); }),
      Parsed<proto::CreateActorRequest>([](const auto& m) { CheckActorSpec(m.spec()); }),
      Parsed<proto::WaitActorRequest>([](const auto& m) { CheckId<ActorId>(m.actor_id()); }),
      Parsed<proto::GetNamedActorRequest>([](const auto&) {}),
      Parsed<proto::KillActorRequest>([](const auto& m) { CheckId<ActorId>(m.actor_id()); }),
      // owner service
      Parsed<proto::BorrowerRequest>([](const auto& m) {
        CheckId<ObjectId>(m.object_id());
        CheckId<WorkerId>(m.borrower_worker_id());
        CheckId<TaskId>(m.task_id());
      }),
      Parsed<proto::GetObjectRequest>([](const auto& m) { CheckId<ObjectId>(m.object_id()); }),
      // worker
      Parsed<proto::PushTaskRequest>([](const auto& m) { CheckTaskSpec(m.spec()); }),
      Parsed<proto::PushActorTaskRequest>([](const auto& m) {
        CheckId<ActorId>(m.actor_id());
        CheckTaskSpec(m.spec());
      }),
      Parsed<proto::CreateActorInstanceRequest>([](const auto& m) { CheckActorSpec(m.spec()); }),
      // replies
      Parsed<proto::RpcStatus>([](const auto& m) {
        absl::Status s(static_cast<absl::StatusCode>(m.code()), m.message());
        (void)s.ToString();
      }),
      Parsed<proto::PushTaskReply>([](const auto& m) {
        if (m.has_return_value()) CheckValue(m.return_value(), m.format(), m.dtype());
        for (const auto& info : m.contained()) {
          CheckId<ObjectId>(info.object_id());
          CheckId<WorkerId>(info.owner_worker_id());
        }
      }),
      Parsed<proto::GetObjectReply>([](const auto& m) {
        if (m.has_value()) CheckValue(m.value(), m.format(), m.dtype());
      }),
      Parsed<proto::RequestWorkerLeaseReply>(
          [](const auto& m) { CheckId<WorkerId>(m.worker_id()); }),
      Parsed<proto::RegisterDriverReply>([](const auto&) {}),
      Parsed<proto::RegisterJobReply>([](const auto&) {}),
      Parsed<proto::ObjectLocationReply>([](const auto&) {}),
      Parsed<proto::NodeStats>([](const auto&) {}),
      Parsed<proto::ClusterStatus>([](const auto&) {}),
      Parsed<proto::ObjectList>([](const auto&) {}),
      Parsed<proto::ActorInfo>([](const auto& m) { CheckId<ActorId>(m.actor_id()); }),
      Parsed<proto::ActorList>([](const auto&) {}),
      Parsed<proto::CreateActorInstanceReply>([](const auto&) {}),
      // Appended, so that the indexes above (and the seeds in make_seeds.cc) stay put.
      Parsed<proto::GetWorkerFailureCauseRequest>(
          [](const auto& m) { CheckId<WorkerId>(m.worker_id()); }),
      Parsed<proto::WorkerFailureCause>([](const auto&) {}),
  };
  return kMessages;
}

}  // namespace
}  // namespace raio::fuzz

// Parse failures are expected here by the million: keep protobuf from logging each one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const auto& messages = raio::fuzz::Messages();
  messages[data[0] % messages.size()](
      std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
