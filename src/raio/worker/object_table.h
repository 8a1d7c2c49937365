// ObjectTable: the objects a process knows: those it owns (it submitted the task or
// called Put) and those it borrows (it holds an ObjectRef to another process's object).
//
// Owned entries hold the value or error once ready, the tasks waiting for them, remote
// processes waiting for them (GET_OBJECT), and their references: ObjectRef copies in this
// process, pending tasks that take them as arguments, objects whose values contain them,
// and borrowers (other processes, by worker id). An owned object is freed when all are
// gone. Borrowed entries count the local references and remember the owner; when they
// reach zero the owner is told (REMOVE_BORROWER). This is the ownership-based distributed
// reference counting of Ray (Wang et al., "Ownership: a distributed futures system for
// fine-grained tasks", NSDI 2021), simplified to one level of borrowers.
// Threading: not thread-safe; CoreWorker guards it with its mutex.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "raio/common.pb.h"
#include "raio/common/ids.h"
#include "raio/internal/runtime.h"
#include "raio/rpc/connection.h"

namespace raio::worker {

struct Lineage;  // task_submitter.h

// Why an owned in-store object has no lineage (ObjectEntry::lineage is null): what a loss
// of its every copy reports.
enum class NoLineage : uint8_t {
  kNotATask,      // raio::Put, or an actor call's result (never re-run)
  kNoRetries,     // its task had no retries left (max_retries)
  kContainsRefs,  // its value holds ObjectRefs (their borrows are not replayed)
  kListArgument,  // its task took a std::vector of ObjectRefs with in-store elements
};

struct ObjectEntry {
  bool ready = false;
  internal::ValueView value;  // ready with an inline value
  bool in_store = false;      // ready, value in the node's object store
  // in_store: the nodes (TCP endpoints) known to hold a copy, the primary first. An
  // owner's list grows as readers pull copies (ADD_OBJECT_LOCATION); a borrower's is what
  // the owner said.
  std::vector<proto::Address> locations;
  std::shared_ptr<const proto::ErrorInfo> error;  // ready with an error
  int local_refs = 0;
  int task_arg_refs = 0;
  // Tasks and actor calls whose arguments wait for this object, by id (see
  // DependencyResolver): an entry cancelled meanwhile is simply not found.
  std::vector<TaskId> dependents;
  std::vector<ObjectId> contained;  // refs held by this object's value
  // Owned objects: other processes holding references, by worker id.
  std::map<WorkerId, int> borrowers;
  std::vector<std::pair<std::shared_ptr<rpc::Connection>, rpc::FrameHeader>> remote_getters;
  // Borrowed objects.
  bool borrowed = false;
  WorkerId owner_id;
  std::string owner_address;
  int owner_registrations = 0;  // ADD_BORROWER counts the owner holds for this process
  bool fetch_requested = false;
  // Owned objects: references registered by the executor of a task on behalf of the
  // task's caller (the ref is inside the task's result), by (caller, task return id).
  // Only the latest attempt of a task counts: a retry's registrations replace those of
  // an attempt whose worker died before the caller received its result.
  struct OnBehalf {
    uint32_t attempt = 0;
    int count = 0;
  };
  std::map<std::pair<WorkerId, ObjectId>, OnBehalf> on_behalf;
  // Owned objects in the store made by a task: how to make the value again when every
  // copy is lost with its node (TaskSubmitter::Reconstruct), shared by the task's returns;
  // or why there is none.
  std::shared_ptr<Lineage> lineage;
  NoLineage no_lineage = NoLineage::kNotATask;
};

// Adds node `node` to `e`'s locations unless listed (by node id); false when it was.
inline bool AddLocation(ObjectEntry& e, const proto::Address& node) {
  for (const auto& a : e.locations) {
    if (a.node_id() == node.node_id()) return false;
  }
  e.locations.push_back(node);
  return true;
}

class ObjectTable {
 public:
  struct Callbacks {
    // An entry was freed (already removed from the table).
    std::function<void(const ObjectId&, ObjectEntry&)> on_free;
    // An entry became ready (value, store or error).
    std::function<void(const ObjectId&, ObjectEntry&)> on_ready;
  };
  explicit ObjectTable(Callbacks callbacks) : callbacks_(std::move(callbacks)) {}

  // Adds a not-yet-ready owned object with `local_refs` references.
  void Create(const ObjectId& id, int local_refs);
  // Adds (or finds) a borrowed entry and takes one local reference. Returns whether the
  // entry is new.
  bool AddBorrowed(const ObjectId& id, const WorkerId& owner, const std::string& address);
  ObjectEntry* Find(const ObjectId& id);
  // Marks ready with a value / in the store / with an error. Returns the ids of the tasks
  // that waited for it; empty if the object was already freed (then a store value is deleted
  // through on_free).
  std::vector<TaskId> SetValue(const ObjectId& id, internal::ValueView value);
  std::vector<TaskId> SetInStore(const ObjectId& id);
  std::vector<TaskId> SetError(const ObjectId& id, std::shared_ptr<const proto::ErrorInfo> e);
  // Makes a ready object pending again (its every copy was lost and its task runs again):
  // value, error and locations are dropped, references and lineage kept. No-op if absent.
  void Reset(const ObjectId& id);
  // Records refs held by the object's value (each already counted once for it); if the
  // object is gone, releases them.
  void SetContained(const ObjectId& id, std::vector<ObjectId> contained);
  void AddLocalRef(const ObjectId& id);
  void RemoveLocalRef(const ObjectId& id);
  void AddTaskArgRef(const ObjectId& id);
  void RemoveTaskArgRef(const ObjectId& id);
  void AddBorrower(const ObjectId& id, const WorkerId& borrower, int count);
  void RemoveBorrower(const ObjectId& id, const WorkerId& borrower, int count);
  // A borrower process died: drops its references to every object.
  void RemoveBorrowerEverywhere(const WorkerId& borrower);
  // Adds `count` references of `borrower` to owned object `id`, registered by the worker
  // running attempt `attempt` of the task whose return object is `task_return` (the ref is
  // in that task's result). `self` is this process's worker id: a registration for it is
  // a local reference. Registrations of an older attempt are replaced (the attempt died
  // before its result arrived) or, when they arrive late, ignored. Returns false when
  // `id` is not an owned object here.
  bool AddBorrowerOnBehalf(const ObjectId& id, const WorkerId& borrower, const WorkerId& self,
                           const ObjectId& task_return, uint32_t attempt, int count);
  // This process's own task `task_return` is settled: its result arrived (`delivered`: the
  // references registered on our behalf now belong to the result) or its worker died
  // (they are dropped; a retry registers again).
  void SettleOnBehalf(const ObjectId& task_return, const WorkerId& self, bool delivered);
  std::size_t size() const { return objects_.size(); }
  // Calls f(id, entry) for every entry (Shutdown's last look); f must not add or free any.
  template <typename F>
  void ForEach(F&& f) {
    for (auto& [id, e] : objects_) f(id, e);
  }

 private:
  // Entries stay where they are: callers hold ObjectEntry pointers across inserts.
  // (absl::node_hash_map was tried: no faster on the async rows, slower on Wait's scan.)
  using Map = std::unordered_map<ObjectId, ObjectEntry, ObjectId::Hasher>;
  std::vector<TaskId> MarkReady(Map::iterator it);
  void MaybeFree(Map::iterator it);

  // Erases `borrower`'s on-behalf bookkeeping of entry `e` (its references are gone).
  static void ForgetOnBehalf(ObjectEntry& e, const WorkerId& borrower);

  Callbacks callbacks_;
  Map objects_;
  // Task return id -> owned objects holding references registered on this process's
  // behalf by that task's executor (until SettleOnBehalf).
  std::unordered_map<ObjectId, std::vector<ObjectId>, ObjectId::Hasher> self_on_behalf_;
};

}  // namespace raio::worker
