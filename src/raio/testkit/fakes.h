// The fake peers of an owner (a driver or worker's CoreWorker) and of a node daemon:
// FakeNode, FakeWorker and FakeHead, FakePeers (fake_peer.h) with the address each has in
// the product and builders of the replies tests give most.
//
// How they plug in (the only two places, so that they can move to a connection pool's
// injectable factory once there is one):
//   - FakeNode::Connect() is the node connection a TaskSubmitter, ActorSubmitter or
//     CoreWorker is constructed with;
//   - a FakeWorker listens on a Unix socket, which FakeNode::Granted (the lease reply's
//     worker_socket_path) and FakeNode::Alive (the actor's address) name; the submitter
//     connects there itself.
// FakeHead listens on 127.0.0.1 port 0 and runs on its own thread: its clients (a
// NodeManager registering) block in CallSync, which a stepped loop could not answer.
//
// Thread-safety: as FakePeer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "raio/actor.pb.h"
#include "raio/common/event_loop.h"
#include "raio/common/ids.h"
#include "raio/common/mutex.h"
#include "raio/head.pb.h"
#include "raio/node.pb.h"
#include "raio/task.pb.h"
#include "raio/testkit/fake_peer.h"

namespace raio::testkit {

// A leased worker or an actor's process: serves PUSH_TASK and PUSH_ACTOR_TASK on the Unix
// socket `<dir>/<name>.sock`.
// The node id fake workers run on: owners under test connect to them over their Unix
// socket when their connection pool's local node is this one.
inline const std::string kFakeNodeId = std::string("fakenode", 8);

class FakeWorker : public FakePeer {
 public:
  FakeWorker(boost::asio::io_context& io, const std::string& dir, std::string name,
             CallLog* log = nullptr);

  const WorkerId& id() const { return id_; }
  const std::string& socket_path() const { return socket_path_; }
  // Where it listens, as a node names its workers (on kFakeNodeId, Unix socket only).
  proto::Address address() const;
  // The process dies: it stops listening and every connection to it closes.
  void Crash();

  // A successful task reply whose single return is the raw bytes `value`, inline.
  static proto::PushTaskReply Value(const std::string& value);

 private:
  WorkerId id_;
  std::string socket_path_;
};

// A node daemon as an owner sees it: leases, lease returns and cancels, failure causes,
// actor lookups.
class FakeNode : public FakePeer {
 public:
  explicit FakeNode(boost::asio::io_context& io, CallLog* log = nullptr, std::string name = "node");

  // REQUEST_WORKER_LEASE answers.
  static proto::RequestWorkerLeaseReply Granted(const FakeWorker& worker, bool saturated = false);
  static proto::RequestWorkerLeaseReply Cancelled();
  // GET_WORKER_FAILURE_CAUSE: the worker crashed while running `task` (its spec's task_id).
  static proto::WorkerFailureCause CrashedRunning(const std::string& task_id);
  // WAIT_ACTOR answers: alive in `worker` at `incarnation`; dead with `cause`.
  static proto::ActorInfo Alive(const FakeWorker& worker, uint32_t incarnation,
                                int max_task_retries = 0);
  static proto::ActorInfo Dead(const std::string& cause);
};

// The head as a node daemon sees it, on its own thread, at 127.0.0.1:<port>. It answers
// every REGISTER_NODE by itself with `register_answer` (OK: an empty reply; else that
// error), since NodeManager::Create blocks until then; other requests wait for the test.
// Its connections are the nodes': the test calls a node over them (GET_NODE_STATS).
class FakeHead {
 public:
  explicit FakeHead(absl::Status register_answer = absl::OkStatus(), CallLog* log = nullptr);
  // Stops its thread, then closes everything.
  ~FakeHead();
  FakeHead(const FakeHead&) = delete;
  FakeHead& operator=(const FakeHead&) = delete;

  FakePeer& peer() { return peer_; }
  // Every REGISTER_NODE request so far, in order.
  std::vector<proto::RegisterNodeRequest> registrations() const;
  // "127.0.0.1:<port>", as NodeManager::Options::head_address.
  std::string address() const;

 private:
  EventLoop loop_{"fake-head"};
  FakePeer peer_;
  mutable raio::Mutex mu_;
  std::vector<proto::RegisterNodeRequest> registrations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace raio::testkit
