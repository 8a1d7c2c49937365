#include "raio/testkit/fakes.h"

#include "absl/strings/str_cat.h"
#include "raio/serialization.h"

namespace raio::testkit {

FakeWorker::FakeWorker(boost::asio::io_context& io, const std::string& dir, std::string name,
                       CallLog* log)
    : FakePeer(name, io, log), id_(RandomId<WorkerId>()), socket_path_(dir + "/" + name + ".sock") {
  absl::Status s = ListenUnix(socket_path_);
  EXPECT_TRUE(s.ok()) << s;
}

void FakeWorker::Crash() {
  StopListening();
  DropConnections();
}

proto::PushTaskReply FakeWorker::Value(const std::string& value) {
  proto::PushTaskReply reply;
  reply.set_return_value(value);
  reply.set_format(static_cast<uint32_t>(internal::ValueFormat::kRaw));
  return reply;
}

proto::Address FakeWorker::address() const {
  proto::Address a;
  a.set_ip("127.0.0.1");
  a.set_node_id(kFakeNodeId);
  a.set_worker_id(id_.Binary());
  a.set_unix_socket(socket_path_);
  return a;
}

FakeNode::FakeNode(boost::asio::io_context& io, CallLog* log, std::string name)
    : FakePeer(std::move(name), io, log) {}

proto::RequestWorkerLeaseReply FakeNode::Granted(const FakeWorker& worker, bool saturated) {
  proto::RequestWorkerLeaseReply reply;
  reply.set_result(proto::RequestWorkerLeaseReply::GRANTED);
  reply.set_worker_id(worker.id().Binary());
  *reply.mutable_worker_address() = worker.address();
  reply.set_saturated(saturated);
  return reply;
}

proto::RequestWorkerLeaseReply FakeNode::Cancelled() {
  proto::RequestWorkerLeaseReply reply;
  reply.set_result(proto::RequestWorkerLeaseReply::CANCELLED);
  reply.set_message("cancelled by the owner");
  return reply;
}

proto::WorkerFailureCause FakeNode::CrashedRunning(const std::string& task_id) {
  proto::WorkerFailureCause cause;
  cause.set_kind(proto::WorkerFailureCause::CRASHED);
  cause.set_message("pid 1234 was killed by signal 9 (SIGKILL: Killed)");
  cause.set_running_task_known(true);
  cause.set_running_task_id(task_id);
  return cause;
}

proto::ActorInfo FakeNode::Alive(const FakeWorker& worker, uint32_t incarnation,
                                 int max_task_retries) {
  proto::ActorInfo info;
  info.set_state(proto::ACTOR_ALIVE);
  *info.mutable_address() = worker.address();
  info.set_incarnation(incarnation);
  info.set_max_task_retries(max_task_retries);
  return info;
}

proto::ActorInfo FakeNode::Dead(const std::string& cause) {
  proto::ActorInfo info;
  info.set_state(proto::ACTOR_DEAD);
  info.set_death_cause(cause);
  return info;
}

FakeHead::FakeHead(absl::Status register_answer, CallLog* log) : peer_("head", loop_.io(), log) {
  peer_.AutoReply<proto::REGISTER_NODE>(
      [this, answer = std::move(register_answer)](
          const proto::RegisterNodeRequest& req) -> absl::StatusOr<proto::RegisterNodeReply> {
        raio::MutexLock lock(&mu_);
        registrations_.push_back(req);
        if (!answer.ok()) return answer;
        return proto::RegisterNodeReply();
      });
  absl::Status s = peer_.ListenTcp(0);
  EXPECT_TRUE(s.ok()) << s;
  loop_.Start();
}

std::vector<proto::RegisterNodeRequest> FakeHead::registrations() const {
  raio::MutexLock lock(&mu_);
  return registrations_;
}

FakeHead::~FakeHead() { loop_.Stop(); }

std::string FakeHead::address() const { return absl::StrCat("127.0.0.1:", peer_.port()); }

}  // namespace raio::testkit
