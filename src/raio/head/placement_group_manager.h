// PlacementGroupManager: the head's placement group table and scheduler (Ray's
// GcsPlacementGroupManager with GcsPlacementGroupScheduler; docs/design/placement_groups.md).
//
// A group is a list of bundles (resource maps) with a strategy. Creation registers it
// PENDING and queues it; the manager schedules one group at a time, in creation order
// (a group that cannot fit now holds back the later ones that want any of the resources
// it waits for, so a large group is never starved by a stream of small ones, while groups
// wanting other resources go ahead; groups that no set of the cluster's nodes could ever
// hold are set aside as infeasible and hold nobody back):
//  1. choose: a node for every unplaced bundle from the nodes' reported available
//     resources (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD; see Choose);
//  2. prepare: PREPARE_BUNDLES to every chosen node, which holds the raw resources now or
//     refuses; any refusal (or a node gone) cancels what the others prepared, and the group
//     is tried again after a backoff (100 ms, x1.5, at most 1 s) or when a node reports;
//  3. commit: COMMIT_BUNDLES turns the held resources into the group's renamed resources
//     (common/placement_resources.h); once every node has committed the group is CREATED.
// No group ever holds part of its bundles while waiting: a failed attempt gives back all
// it prepared before the next attempt of any group starts.
//
// Removal (RemovePlacementGroup, or the end of a non-detached group's job) cancels the
// bundles on their nodes, which end the tasks and actors holding them; the group is
// REMOVED and its id is announced to the nodes (TakeRemoved), which fail leases still
// queued for it. A node's death moves the groups with bundles there to RESCHEDULING: those
// bundles are unplaced and the group goes to the front of the queue.
//
// It talks to nodes only through `Nodes` (the head's connections; a fake in tests).
// Threading: not thread-safe; lives on the head's loop. Callbacks given to `Nodes` must
// run on that loop, never inline from the call that took them.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/common/ids.h"
#include "raio/common/resources.h"
#include "raio/head.pb.h"
#include "raio/placement_group.pb.h"
#include "raio/rpc.pb.h"

namespace raio::head {

class PlacementGroupManager {
 public:
  // The most bundles a group may have. Placing a group is work on the head's loop that
  // grows faster than its bundle count (100,000 bundles held the loop past the nodes'
  // health-check limit, and every node took itself for cut off); Create refuses more.
  static constexpr int kMaxBundles = 10000;
  class Nodes {
   public:
    virtual ~Nodes() = default;
    // Sends PREPARE_BUNDLES / COMMIT_BUNDLES / CANCEL_BUNDLES to node `node_id` (hex);
    // `done` gets its answer, or why none came.
    virtual void Send(proto::Method method, const std::string& node_id,
                      const proto::BundlesRequest& request,
                      std::function<void(absl::Status)> done) = 0;
    // Runs `fn` on the head's loop after `delay`.
    virtual void RunAfter(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
    // Milliseconds since the Unix epoch (create and created times).
    virtual int64_t NowMs() = 0;
  };
  using InfoCallback = std::function<void(absl::StatusOr<proto::PlacementGroupInfo>)>;

  // `nodes` must outlive the manager.
  explicit PlacementGroupManager(Nodes& nodes);

  // The node table: a node joined or reported (its totals and available resources), or
  // left (died or stopped): the groups with bundles there are rescheduled.
  void OnNodeUpdated(const proto::NodeInfo& node);
  void OnNodeRemoved(const std::string& node_id);
  // The job's driver is gone: its groups that are not detached are removed.
  void OnJobFinished(uint32_t job_id);

  // CREATE_PLACEMENT_GROUP: validates and registers the group, PENDING, and queues it.
  // Errors: InvalidArgument (id not 8 bytes or reused, no bundles, a bundle without
  // resources or with a negative, zero-only or non-finite amount, an unknown strategy),
  // AlreadyExists (a live group has the name in the namespace), FailedPrecondition (the
  // job ended).
  absl::StatusOr<proto::PlacementGroupInfo> Create(const proto::PlacementGroupSpec& spec);
  // WAIT_PLACEMENT_GROUP: `done` gets the group's info once it is CREATED or REMOVED, or
  // infeasible (at once if it is), or after `timeout` (the info as it is then). NotFound
  // for an unknown id.
  void Wait(const PlacementGroupId& id, std::chrono::milliseconds timeout, InfoCallback done);
  // REMOVE_PLACEMENT_GROUP: `done` runs once every node holding a bundle has given it
  // back (at once for a group already removed). NotFound for an unknown id.
  void Remove(const PlacementGroupId& id, const std::string& cause,
              std::function<void(absl::Status)> done);
  // GET_PLACEMENT_GROUP by id, or by name in a namespace (live groups only). NotFound.
  absl::StatusOr<proto::PlacementGroupInfo> Get(const PlacementGroupId& id) const;
  absl::StatusOr<proto::PlacementGroupInfo> GetNamed(const std::string& ns,
                                                     const std::string& name) const;
  // Every group, removed ones included (the newest kMaxRemoved of those), oldest first.
  proto::PlacementGroupList List() const;
  // Ids of the groups removed since the last call (for UPDATE_CLUSTER_VIEW).
  std::vector<std::string> TakeRemoved();
  // Answers every waiter with Unavailable and stops scheduling (the head is stopping).
  void Stop();

  static constexpr std::size_t kMaxRemoved = 1000;

 private:
  struct Waiter {
    uint64_t id;
    InfoCallback done;
  };
  struct Group {
    proto::PlacementGroupInfo info;
    std::vector<ResourceSet> bundles;
    std::vector<Waiter> waiters;
    std::vector<std::function<void(absl::Status)>> remove_waiters;
    bool removing = false;  // removal requested while an attempt was in flight
  };
  // One scheduling attempt in flight: the bundles it prepared per node.
  struct Attempt {
    uint64_t seq = 0;
    PlacementGroupId id;
    std::map<std::string, std::vector<uint32_t>> by_node;
    std::map<std::string, bool> prepared;  // node -> its PREPARE succeeded
    int replies_left = 0;
    std::string failure;
    bool committing = false;
  };

  // Assigns a node to every unplaced bundle of `g` (placed ones stay), using `room` (raw
  // resources per alive node) and deducting from it. Empty string: success; otherwise
  // why it cannot be placed.
  // `totals`: `room` is the nodes' totals (the messages then say so).
  std::string Choose(const Group& g, std::map<std::string, ResourceSet> room,
                     std::map<uint32_t, std::string>* out, bool totals = false) const;
  // Whether no set of the alive nodes could ever hold `g` (by their totals); the message
  // names the bundles and the cluster's resources.
  std::string InfeasibleReason(const Group& g) const;
  void Schedule();
  // A PREPARE or COMMIT_BUNDLES request for bundles `indexes` of `g`.
  static proto::BundlesRequest BundlesFor(const PlacementGroupId& id, const Group& g,
                                          const std::vector<uint32_t>& indexes);
  void OnPrepared(uint64_t attempt, const std::string& node_id, absl::Status status);
  void OnCommitted(uint64_t attempt, const std::string& node_id, absl::Status status);
  // The attempt failed: cancel what was prepared or committed, retry later.
  void AbortAttempt(std::string why);  // by value: it often comes from the attempt
  void FinishAttempt();
  void Retry();
  // Cancels the group's bundles on each node of `nodes` (the listed indexes; an empty list:
  // all of the group's there), then runs `done`.
  void CancelOn(const PlacementGroupId& id,
                const std::map<std::string, std::vector<uint32_t>>& nodes, const std::string& cause,
                std::function<void()> done);
  void MarkRemoved(const PlacementGroupId& id, Group& g, const std::string& cause);
  void NotifyWaiters(Group& g);
  bool Settled(const Group& g) const;
  std::string ClusterDescription() const;

  Nodes& nodes_;
  std::map<PlacementGroupId, Group> groups_;
  std::deque<PlacementGroupId> order_;    // every group, creation order (for List)
  std::deque<PlacementGroupId> queue_;    // PENDING / RESCHEDULING, front first
  std::deque<PlacementGroupId> removed_;  // oldest first, at most kMaxRemoved kept
  std::map<std::pair<std::string, std::string>, PlacementGroupId> names_;
  struct NodeState {
    ResourceSet total;      // raw
    ResourceSet available;  // raw, as last reported
    // Prepared by this manager since the node's last report (not yet in `available`).
    ResourceSet held_since_report;
  };
  std::map<std::string, NodeState> node_state_;
  std::set<uint32_t> finished_jobs_;
  std::vector<std::string> newly_removed_;
  std::optional<Attempt> attempt_;
  uint64_t attempt_seq_ = 0;
  uint64_t waiter_seq_ = 0;
  std::chrono::milliseconds backoff_{0};
  bool retry_armed_ = false;
  bool stopped_ = false;
};

}  // namespace raio::head
