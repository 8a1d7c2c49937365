// ActorDirectory: the head's actor table and actor scheduler (Ray's GcsActorManager with
// GcsActorScheduler in its GCS-side mode). It registers every actor of the cluster (names
// unique per namespace among live actors, cluster-wide), picks the node each one goes to
// with the cluster scheduler (scheduling/cluster_scheduler.h: the actor's demand,
// strategy and label selector, deciding for the creator's node as the local one), asks
// that node to create it (PLACE_ACTOR), follows the node's reports of its state (got its
// resources, ALIVE with its address, RESTARTING, DEAD with the cause), and answers
// lookups: WAIT_ACTOR (once alive at an incarnation, or dead), GET_NAMED_ACTOR, KILL_ACTOR
// (forwarded to the actor's node) and the cluster's actor list.
//
// Placement follows the lease protocol (docs/design/cluster.md): when the view says the
// chosen node has room now, the node must hold the resources at once or answer REJECTED,
// and the directory decides again with that node's figure lowered (at most
// `max_rejections` times, then it waits on the node it chose); when no node has room now,
// it waits on the node the scheduler chose (the creator's, when that node can ever hold
// it). A demand no node can ever meet fails the creation with `fail_infeasible` (an
// embedded cluster, which no node can join) and for a hard affinity to a node not in the
// cluster; otherwise the actor waits at the head, listed as infeasible, until a node that
// can hold it joins. Restarts stay with the actor's node (ActorManager).
//
// Ends: a non-detached actor dies with its job (OnJobFinished; its node ends the process);
// every actor of a node whose connection to the head closed dies naming the node
// (OnNodeRemoved; an actor whose placement there was unanswered is placed again).
//
// It talks to nodes only through `Nodes` (the head's node connections; a fake in tests) and
// answers through callbacks, so that it is tested without sockets.
// Threading: not thread-safe; lives on the head's loop. Callbacks given to `Nodes` must be
// run on that loop, never inline from the call that took them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/actor.pb.h"
#include "raio/common/ids.h"
#include "raio/common/resources.h"
#include "raio/head.pb.h"
#include "raio/scheduling/cluster_scheduler.h"

namespace raio::head {

class ActorDirectory {
 public:
  // How the directory reaches the nodes (by hex node id).
  class Nodes {
   public:
    virtual ~Nodes() = default;
    // Sends PLACE_ACTOR; `done` gets the node's reply or why none came (the node is gone).
    virtual void Place(const std::string& node_id, const proto::PlaceActorRequest& request,
                       std::function<void(absl::StatusOr<proto::PlaceActorReply>)> done) = 0;
    // Sends KILL_LOCAL_ACTOR; `done` runs when the node has answered (or is gone).
    virtual void Kill(const std::string& node_id, const proto::KillActorRequest& request,
                      std::function<void(absl::Status)> done) = 0;
  };
  struct Options {
    // No node can ever join (an embedded cluster): an actor no node can hold fails at
    // creation instead of waiting for one.
    bool fail_infeasible = false;
    // The scheduler's policy (config::scheduler_spread_threshold, ..._top_k_fraction).
    double spread_threshold = 0.5;
    double top_k_fraction = 0.2;
    uint64_t seed = 0;
    // REJECTED answers before an actor waits on the node it chose
    // (config::max_spillback_hops).
    int max_rejections = 4;
  };
  using InfoCallback = std::function<void(absl::StatusOr<proto::ActorInfo>)>;
  using DoneCallback = std::function<void(absl::Status)>;

  // `nodes` must outlive the directory.
  ActorDirectory(Nodes& nodes, Options options);

  // The node table: a node joined or reported its resources (`node`: its entry in the
  // head's table), or left (its actors die, naming it and `cause`, e.g. "its connection
  // to the head closed" or "missed 10 health checks in a row").
  void OnNodeUpdated(const proto::NodeInfo& node);
  void OnNodeRemoved(const std::string& node_id,
                     const std::string& cause = "its connection to the head closed");
  // Placement group `pg_id` (8 bytes) was removed: its actors still waiting at the head for
  // a bundle die with `cause`.
  void OnPlacementGroupRemoved(const std::string& pg_id, const std::string& cause);
  // The job's driver is gone: its actors that are not detached die ("its job ended").
  void OnJobFinished(uint32_t job_id);

  // CREATE_ACTOR: registers the actor of `job` (its configuration, for nodes that do not
  // know it), created by a process on `creator_node` (hex id), and schedules it. Returns
  // its info at once (PENDING). Errors: InvalidArgument (bad or reused id, bad
  // resources or selector), AlreadyExists (a live actor has its name in its namespace;
  // the message names both and where that actor is), ResourceExhausted (no node can ever
  // hold it and it may not wait: see the class comment; the message names the demand,
  // the strategy and the cluster's nodes), FailedPrecondition (the job ended).
  absl::StatusOr<proto::ActorInfo> Create(const proto::ActorSpec& spec,
                                          const proto::JobConfigInfo& job,
                                          const std::string& creator_node);
  // WAIT_ACTOR: `done` runs once the actor is ALIVE at an incarnation >= min_incarnation,
  // or DEAD (at once if it is already); NotFound for an unknown id.
  void Wait(const ActorId& id, uint32_t min_incarnation, InfoCallback done);
  // GET_NAMED_ACTOR: NotFound when no live actor has that name in the namespace.
  absl::StatusOr<proto::ActorInfo> GetNamed(const std::string& ns, const std::string& name) const;
  // KILL_ACTOR: `done` runs once the actor's node has ended it (its new state known
  // here), at once for an actor that is unknown, dead or not on a node yet.
  void Kill(const ActorId& id, bool no_restart, DoneCallback done);
  // REPORT_ACTOR_STATE from node `node_id`: taken only for actors placed there.
  void OnReport(const std::string& node_id, const proto::ActorInfo& report);
  // Every actor the directory knows, dead ones included, with its node.
  proto::ActorList List() const;
  // Answers every waiter with Unavailable and forgets them (the head is stopping).
  void Stop();

 private:
  struct Waiter {
    uint32_t min_incarnation = 0;
    InfoCallback done;
  };
  struct Record {
    proto::ActorSpec spec;
    proto::JobConfigInfo job;
    ResourceSet demand;
    std::string creator_node;
    proto::ActorState state = proto::ACTOR_PENDING;
    // The node it is placed on or being placed on; empty while it waits at the head.
    std::string node_id;
    bool placing = false;     // a PLACE_ACTOR is unanswered
    uint64_t placements = 0;  // PLACE_ACTORs sent, to match their answers
    int rejections = 0;       // REJECTED answers in a row
    bool infeasible = false;  // waits at the head for a node that can hold it
    std::string pending_reason;
    // A kill that came while its placement was unanswered (no_restart).
    std::optional<bool> kill_while_placing;
    proto::ActorInfo reported;  // the node's latest report
    std::string death_cause;
    std::vector<Waiter> waiters;
  };

  proto::ActorInfo Info(const ActorId& id, const Record& r) const;
  // Decides where `r` goes and sends it there, or leaves it waiting at the head. Returns
  // the error for a creation that must fail (the record is then untouched).
  absl::Status Schedule(const ActorId& id, Record& r, bool at_creation);
  void OnPlaced(const ActorId& id, uint64_t placement, const std::string& node_id,
                absl::StatusOr<proto::PlaceActorReply> reply);
  void Bury(const ActorId& id, Record& r, const std::string& cause);
  void NotifyWaiters(const ActorId& id, Record& r);
  bool JobEnded(const Record& r) const;
  // "node <id> <total>; ..." for error messages.
  std::string ClusterDescription() const;

  Nodes& nodes_;
  Options options_;
  // The head's picture of the nodes: no node is its own ("" local), so that every entry
  // follows the reports and is lowered on each placement until the next one.
  scheduling::ClusterView view_{""};
  scheduling::ClusterScheduler scheduler_;
  std::map<ActorId, Record> actors_;
  std::map<std::pair<std::string, std::string>, ActorId> names_;  // (namespace, name)
  std::set<ActorId> infeasible_;                                  // waiting at the head
  std::set<uint32_t> finished_jobs_;
  bool stopped_ = false;
};

}  // namespace raio::head
