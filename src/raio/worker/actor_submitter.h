// ActorSubmitter: the caller side of actor calls. For each actor this process calls,
// it resolves each call's ObjectRef arguments (DependencyResolver, without blocking the
// caller), learns where the actor lives (WAIT_ACTOR to the node, answered when it is alive),
// pushes calls straight to the actor's worker over one connection (so calls from this
// process run in submission order: a call waiting for its arguments holds back the
// calls submitted after it), and, when that connection breaks, waits for the
// restarted actor and re-sends calls that may be retried (SetMaxTaskRetries) or fails
// them with ACTOR_DIED. Once the actor is dead every call fails with the death cause.
// Threading: every method must be called with the CoreWorker's mutex held; replies
// arrive on the CoreWorker's loop thread, which takes it.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "raio/actor.pb.h"
#include "raio/common/event_loop.h"
#include "raio/common/ids.h"
#include "raio/common/mutex.h"
#include "raio/rpc/connection.h"
#include "raio/worker/task_submitter.h"

namespace raio::worker {

class ActorSubmitter {
 public:
  // `outbox` takes the sends decided under `mu`; `pool` gives connections to actors'
  // workers (never used with `mu` held).
  ActorSubmitter(raio::Mutex& mu, Outbox& outbox, rpc::ConnectionPool& pool, EventLoop& loop,
                 std::shared_ptr<rpc::Connection> node, TaskSubmitter& tasks, ObjectTable& objects,
                 DependencyResolver& resolver);

  // Queues a call; `held` are object references (already taken) to drop when it
  // completes; `ref_args` are its ObjectRef arguments, whose TaskArg slots in `request`
  // are filled when they resolve (a failed argument fails the call with its error).
  void Submit(const ActorId& actor, proto::PushActorTaskRequest request, ObjectId return_id,
              int num_returns, std::vector<ObjectId> held, std::vector<RefArg> ref_args)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Shutdown() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // See TaskSubmitter::AssertHeld.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK(mu_) { mu_.AssertHeld(); }
  // This process created `actor` demanding `demand` (for DescribePending).
  void NoteCreated(const ActorId& actor, std::string demand) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the actor call returning `id` is waiting for, for a Get that timed out ("" when
  // it is not a pending call of this process's).
  std::string DescribePending(const ObjectId& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The incarnation of `actor` this process sends calls to now; nullopt while it is not
  // alive here (pending creation, restarting, dead, or unknown).
  std::optional<uint32_t> AliveIncarnation(const ActorId& actor) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The node has ended the actor's process (Kill) that was incarnation `killed` (what
  // AliveIncarnation said before the kill): calls submitted from now on wait for its next
  // incarnation (or its death) instead of going to the dying process. Nothing when the
  // actor was not alive then, or is alive here at a later incarnation already (the restart
  // finished before the kill's reply was taken).
  void OnKilled(const ActorId& actor, std::optional<uint32_t> killed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Node `node_id_hex` died: the connections to the actors that ran there are closed (a
  // process of a node cut off or paused may still answer; the head restarts the actor
  // elsewhere), so that their calls follow the next incarnation.
  void OnNodeRemoved(const std::string& node_id_hex) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

 private:
  struct Call {
    proto::PushActorTaskRequest request;
    ObjectId return_id;  // the first of its num_returns return objects
    int num_returns = 1;
    std::vector<ObjectId> held;
    int retries_used = 0;
    uint32_t attempt = 0;      // sent with each push (a FieldSuffix), as is the sequence
    uint32_t incarnation = 0;  // of the actor process it was last sent to
    bool resolving = false;    // its ObjectRef arguments are not all ready
  };
  struct Actor {
    ActorId id;
    enum class State { kResolving, kAlive, kDead } state = State::kResolving;
    bool waiting = false;  // a WAIT_ACTOR is outstanding
    uint32_t incarnation = 0;
    int max_task_retries = 0;
    std::string death_cause;
    std::shared_ptr<rpc::Connection> conn;
    std::string node_id;                      // hex id of the node its current incarnation runs on
    std::deque<std::shared_ptr<Call>> queue;  // not yet sent
    std::map<uint64_t, std::shared_ptr<Call>> in_flight;  // by sequence
    // Calls lost with the process and not retryable: failed once the node says whether
    // the actor is dead (with its cause) or restarted.
    std::vector<std::shared_ptr<Call>> lost;
    uint64_t next_sequence = 1;
  };

  // The error of a call lost with its actor's process and not retried; `cause` is why the
  // process died, when known.
  static std::string LostInRestart(const ActorId& id, const Call& call, const std::string& cause);
  void WaitForActor(Actor& actor, uint32_t min_incarnation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnActorInfo(const ActorId& id, absl::StatusOr<proto::ActorInfo> reply);
  // A pooled connection closed: an actor reached through it waits for its next incarnation.
  void OnConnectionClosed(const std::shared_ptr<rpc::Connection>& conn);
  void Flush(Actor& actor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A call's outcome. A transport failure means the actor's process is gone (every call
  // in flight on its connection is handled then); the process's own error answer
  // (rpc::IsPeerError) fails just that call.
  void OnReply(const ActorId& id, uint32_t incarnation, uint64_t sequence,
               absl::StatusOr<proto::PushTaskReply> reply);
  void Fail(const std::shared_ptr<Call>& call, const std::string& message,
            proto::ErrorType type = proto::ACTOR_DIED) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes `call` with `error` (dropping its references and any pending resolution).
  void FailWith(const std::shared_ptr<Call>& call, std::shared_ptr<const proto::ErrorInfo> error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The resolver filled (or failed) the arguments of `call` to `actor`.
  void OnResolved(const ActorId& actor, const std::shared_ptr<Call>& call, ResolvedArgs resolved)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(const std::shared_ptr<Call>& call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  raio::Mutex& mu_;
  Outbox& outbox_;
  rpc::ConnectionPool& pool_;
  EventLoop& loop_;
  std::shared_ptr<rpc::Connection> node_;
  TaskSubmitter& tasks_;
  ObjectTable& objects_;
  DependencyResolver& resolver_;
  std::map<ActorId, Actor> actors_ ABSL_GUARDED_BY(mu_);
  // Resource demands of the actors this process created, as text.
  std::map<ActorId, std::string> demands_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace raio::worker
