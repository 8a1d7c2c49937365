// Where a task or actor may run: Ray's scheduling strategies and label selectors.
//
//   raio::Task(F).SetSchedulingStrategy(raio::SchedulingStrategy::Spread()).Remote();
//   raio::Task(F).SetSchedulingStrategy(raio::SchedulingStrategy::NodeAffinity(id)).Remote();
//   raio::Task(F).SetLabelSelector({{"zone", "in(a,b)"}, {"gpu", "!none"}}).Remote();
//   raio::Actor(T::Create).SetSchedulingStrategy(raio::SchedulingStrategy::Spread()).Remote();
//
// DEFAULT (Ray's hybrid policy) packs work onto the caller's node until it is half used,
// then spreads it over the least used nodes with room; SPREAD takes the node with room
// that was chosen least often; NodeAffinity runs on one node (hex id, as
// raio::GetNodeId() gives it), waiting for room there; `soft` lets it run elsewhere
// when that node is gone, can never meet the demand, or is full. A hard affinity to a
// node that is not in the cluster fails at Get() with UnschedulableError (an actor's, at
// Remote()). For an actor (decided by the head, for the creator's node) the choice is made
// once, at creation; its restarts stay on that node.
// Label selector values: "v" (the node's label equals v), "!v" (differs or is absent),
// "in(a,b)" and "!in(a,b)"; nodes get labels from `raio start --labels JSON`.
// Thread-safety: plain values.
#pragma once

#include <string>
#include <utility>

namespace raio {

class SchedulingStrategy {
 public:
  enum class Kind { kDefault, kSpread, kNodeAffinity };

  static SchedulingStrategy Default() { return SchedulingStrategy(Kind::kDefault, "", false); }
  static SchedulingStrategy Spread() { return SchedulingStrategy(Kind::kSpread, "", false); }
  // `node_id`: 16 hex digits (raio::GetNodeId(), `raio list nodes`); checked at Remote()
  // (InvalidUsageError).
  static SchedulingStrategy NodeAffinity(std::string node_id, bool soft = false) {
    return SchedulingStrategy(Kind::kNodeAffinity, std::move(node_id), soft);
  }

  Kind kind() const { return kind_; }
  const std::string& node_id() const { return node_id_; }
  bool soft() const { return soft_; }

 private:
  SchedulingStrategy(Kind kind, std::string node_id, bool soft)
      : kind_(kind), node_id_(std::move(node_id)), soft_(soft) {}
  Kind kind_;
  std::string node_id_;
  bool soft_;
};

}  // namespace raio
