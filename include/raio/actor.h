// Actors: stateful workers.
//
//   class Counter {
//    public:
//     static Counter* Create(int start) { return new Counter(start); }
//     int Incr(int by) { return value_ += by; }
//    private:
//     explicit Counter(int start) : value_(start) {}
//     int value_;
//   };
//   RAIO_REMOTE(Counter::Create, &Counter::Incr);
//
//   raio::ActorHandle<Counter> c = raio::Actor(Counter::Create).SetName("c").Remote(0);
//   raio::ObjectRef<int> n = c.Task(&Counter::Incr).Remote(5);
//
// An actor is an instance of a registered class living in its own worker process. Its
// factory (a static function returning T* or std::unique_ptr<T>) runs there; method calls
// from one caller run in submission order (SetMaxConcurrency(n) lets n run at once on
// threads, in no particular order). Handles are values: copy them, pass them to tasks and
// actors, return them, store them in objects; every copy reaches the same instance.
// In a cluster of several nodes the head keeps every actor's name and node, so an actor
// created from any node is found (GetActor), called and killed from every node; calls go
// straight from the caller to the actor's process.
// Thread-safety: handles may be used from any thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "raio/errors.h"
#include "raio/export.h"
#include "raio/internal/object_id.h"
#include "raio/internal/runtime.h"
#include "raio/object_ref.h"
#include "raio/placement_group.h"
#include "raio/remote.h"
#include "raio/scheduling.h"
#include "raio/task_caller.h"

namespace raio {

// ActorId (16 random bytes naming one actor for its whole life, across restarts) is
// declared in raio/internal/object_id.h.

namespace internal {

struct ActorOptions {
  std::map<std::string, double> resources;  // held for the actor's lifetime; default none
  std::string name;
  std::string ns;  // namespace; "" = the job's own
  int max_restarts = 0;
  int max_task_retries = 0;
  int max_concurrency = 1;
  bool detached = false;
  SchedulingStrategy strategy = SchedulingStrategy::Default();
  std::map<std::string, std::string> label_selector;
  // As TaskOptions' (raio/internal/runtime.h).
  std::string placement_group_id;
  int placement_bundle_index = -1;
  bool placement_group_capture_child_tasks = false;
  // The bundles it may take its demand from (that bundle, or all of the group's), to
  // refuse at submission a demand no bundle could ever meet.
  std::vector<std::map<std::string, double>> placement_bundles;
};

// Runtime ABI for actors (see raio/internal/runtime.h for the conventions).
RAIO_EXPORT ActorId CreateActor(const std::string& factory_name, const std::string& class_name,
                                std::vector<TaskArg> args, const ActorOptions& options);
// Returns the id of the call's first return object; each of its `num_returns` return
// objects (NthReturnId) holds one adopted local reference.
RAIO_EXPORT ObjectId SubmitActorTask(const ActorId& actor, const std::string& method_name,
                                     std::vector<TaskArg> args, int num_returns = 1);
RAIO_EXPORT void KillActor(const ActorId& actor, bool no_restart);
// nullopt when no live actor has that name; InvalidUsageError when it is of another class.
RAIO_EXPORT std::optional<ActorId> GetNamedActor(const std::string& name, const std::string& ns,
                                                 const std::string& class_name);
// The registered name of a factory (by its address) or of a method; InvalidUsageError if
// not registered.
RAIO_EXPORT const std::string& ResolveFactoryName(const void* key);

template <typename M>
const std::string& ResolveMethodName(M method) {
  for (const auto& [m, name] : MethodTable<M>()) {
    if (m == method) return name;
  }
  throw InvalidUsageError(
      "this actor method is not registered; add it to RAIO_REMOTE(&Class::Method)");
}

}  // namespace internal

template <typename T, typename M, typename R, typename... P>
class ActorTaskCaller {
 public:
  ActorTaskCaller(ActorId actor, M method) : actor_(actor), method_(method) {}

  // Submits the call and returns at once. Arguments as for raio::Task, except that
  // by-value arguments travel inline: above 511 MiB in all (one request) the call throws
  // InvalidUsageError naming the size and the limit (raio::Put large values and pass the
  // ObjectRef). Throws InvalidUsageError if the method is not registered. The result fails with
  // ActorDiedError when the actor is dead (or dies during the call and the call may not
  // be retried: SetMaxTaskRetries), TaskError when the method threw (the actor lives on).
  // A method returning std::tuple<T...> gives std::tuple<ObjectRef<T>...> (see Task).
  template <typename... A>
  internal::RemoteResult<R> Remote(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of arguments for this method");
    static_assert((internal::ArgMatches<P, A>() && ...),
                  "an argument's type does not match the method's parameter type");
    const std::string& name = internal::ResolveMethodName(method_);
    std::vector<internal::TaskArg> task_args;
    task_args.reserve(sizeof...(A));
    (task_args.push_back(internal::MakeArg<P>(std::forward<A>(args))), ...);
    return internal::AdoptReturns<R>(internal::SubmitActorTask(actor_, name, std::move(task_args),
                                                               internal::ReturnsOf<R>::kCount));
  }

 private:
  ActorId actor_;
  M method_;
};

template <typename T>
class ActorHandle {
 public:
  using ActorType = T;
  ActorHandle() = default;
  explicit ActorHandle(const ActorId& id) : id_(id) {}
  const ActorId& ID() const { return id_; }

  template <typename R, typename... P>
  ActorTaskCaller<T, R (T::*)(P...), R, P...> Task(R (T::*method)(P...)) const {
    return {id_, method};
  }
  template <typename R, typename... P>
  ActorTaskCaller<T, R (T::*)(P...) const, R, P...> Task(R (T::*method)(P...) const) const {
    return {id_, method};
  }

  // Ends the actor's process. no_restart = true: the actor is dead for good and every
  // later call fails with ActorDiedError; false: it restarts if it has restarts left.
  // Works from any node; blocks until the actor's node has ended it (through the head).
  // Throws ClusterUnavailableError when the head or the actor's node cannot be reached.
  void Kill(bool no_restart = true) const { internal::KillActor(id_, no_restart); }

  bool operator==(const ActorHandle& o) const { return id_ == o.id_; }

 private:
  ActorId id_;
};

template <typename T, typename... P>
class ActorCreator {
 public:
  ActorCreator(const void* key, std::string class_name)
      : key_(key), class_name_(std::move(class_name)) {}

  // A name, unique among live actors of the namespace; GetActor<T>(name) finds it.
  ActorCreator& SetName(const std::string& name) {
    options_.name = name;
    return *this;
  }
  // The namespace of the name (default: the job's own namespace, "job-<id>").
  ActorCreator& SetNamespace(const std::string& ns) {
    options_.ns = ns;
    return *this;
  }
  // Resources held for the actor's whole life (default: none).
  ActorCreator& SetResources(const std::map<std::string, double>& resources) {
    options_.resources = resources;
    return *this;
  }
  ActorCreator& SetResource(const std::string& name, double amount) {
    options_.resources[name] = amount;
    return *this;
  }
  // Restarts after its process dies (default 0; -1 = unlimited). The factory runs again
  // with the original arguments.
  ActorCreator& SetMaxRestarts(int n) {
    options_.max_restarts = n;
    return *this;
  }
  // Times a call in flight when the process died is re-sent to the restarted actor
  // (default 0: such calls fail with ActorDiedError).
  ActorCreator& SetMaxTaskRetries(int n) {
    options_.max_task_retries = n;
    return *this;
  }
  // Calls that may run at once on threads inside the actor (default 1: one at a time, in
  // each caller's order).
  ActorCreator& SetMaxConcurrency(int n) {
    options_.max_concurrency = n;
    return *this;
  }
  // The actor outlives the job that created it, until killed (or its node leaves).
  ActorCreator& SetDetached(bool detached = true) {
    options_.detached = detached;
    return *this;
  }
  // Which node it is placed on (raio/scheduling.h): DEFAULT packs actors onto the
  // creator's node until it is half used, then spreads them; SPREAD takes the node chosen
  // least often; NodeAffinity(id) that node (waiting for room there; `soft`: elsewhere
  // when it is gone, can never hold the actor, or is full). The node is chosen once, at
  // creation; restarts stay on it.
  ActorCreator& SetSchedulingStrategy(const SchedulingStrategy& strategy) {
    options_.strategy = strategy;
    return *this;
  }
  // Only nodes whose labels match every entry (raio/scheduling.h) may hold it.
  // Places the actor in bundle `bundle_index` of `pg` (-1: any bundle; see
  // raio/placement_group.h): it holds its resources from that bundle. Its creation waits
  // while the group is pending. Throws InvalidUsageError for an empty group or an index
  // outside [-1, number of bundles); Remote() throws InvalidUsageError when a scheduling
  // strategy other than DEFAULT or a label selector is set too (the bundle decides the
  // node), and UnschedulableError when the group was removed.
  ActorCreator& SetPlacementGroup(const PlacementGroup& pg, int bundle_index = -1) {
    internal::CheckBundleIndex(pg, bundle_index);
    options_.placement_group_id = pg.GetID();
    options_.placement_bundle_index = bundle_index;
    options_.placement_bundles =
        bundle_index < 0
            ? pg.GetBundles()
            : std::vector<std::map<std::string, double>>{pg.GetBundles()[bundle_index]};
    return *this;
  }

  ActorCreator& SetLabelSelector(const std::map<std::string, std::string>& selector) {
    options_.label_selector = selector;
    return *this;
  }

  // Creates the actor and returns its handle at once; the head of the cluster registers
  // it and picks its node, and the factory runs in the actor's process there (calls wait
  // until it has). Blocks for the registration (one round trip to the head through this
  // process's node). Throws InvalidUsageError (a live actor anywhere in the cluster has
  // the name in the namespace, bad options, a malformed node id or label selector,
  // arguments above 511 MiB in all: they travel inline, in one request),
  // UnschedulableError (its placement group was removed; no node can ever hold it: in an
  // embedded cluster, or for a hard
  // affinity to a node that is not in the cluster; in a standalone cluster an actor no
  // node can hold otherwise waits, with a warning, for a node that can to join),
  // ClusterUnavailableError (the head cannot be reached, or this job has ended).
  template <typename... A>
  ActorHandle<T> Remote(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of arguments for this factory");
    static_assert((internal::ArgMatches<P, A>() && ...),
                  "an argument's type does not match the factory's parameter type");
    const std::string& name = internal::ResolveFactoryName(key_);
    std::vector<internal::TaskArg> task_args;
    task_args.reserve(sizeof...(A));
    (task_args.push_back(internal::MakeArg<P>(std::forward<A>(args))), ...);
    return ActorHandle<T>(internal::CreateActor(name, class_name_, std::move(task_args), options_));
  }

 private:
  const void* key_;
  std::string class_name_;
  internal::ActorOptions options_;
};

// Starts building an actor from its registered factory.
template <typename T, typename... P>
ActorCreator<T, P...> Actor(T* (*factory)(P...)) {
  return ActorCreator<T, P...>(reinterpret_cast<const void*>(internal::KeyOf(factory)),
                               internal::DemangledTypeName(typeid(T)));
}
template <typename T, typename... P>
ActorCreator<T, P...> Actor(std::unique_ptr<T> (*factory)(P...)) {
  return ActorCreator<T, P...>(reinterpret_cast<const void*>(internal::KeyOf(factory)),
                               internal::DemangledTypeName(typeid(T)));
}

// The live actor named `name` in namespace `ns` ("" = this job's), or nullopt: wherever
// in the cluster it was created or placed (the head keeps the names). Blocks for one round
// trip to the head. Throws InvalidUsageError when that actor is not a T,
// ClusterUnavailableError when the head cannot be reached.
template <typename T>
std::optional<ActorHandle<T>> GetActor(const std::string& name, const std::string& ns = "") {
  auto id = internal::GetNamedActor(name, ns, internal::DemangledTypeName(typeid(T)));
  if (!id) return std::nullopt;
  return ActorHandle<T>(*id);
}

}  // namespace raio

// A handle travels as its actor id.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {
  template <typename T>
  struct pack<raio::ActorHandle<T>> {
    template <typename Stream>
    msgpack::packer<Stream>& operator()(msgpack::packer<Stream>& o,
                                        const raio::ActorHandle<T>& h) const {
      std::string id = h.ID().Binary();
      o.pack_bin(static_cast<uint32_t>(id.size()));
      o.pack_bin_body(id.data(), static_cast<uint32_t>(id.size()));
      return o;
    }
  };
  template <typename T>
  struct convert<raio::ActorHandle<T>> {
    const msgpack::object& operator()(const msgpack::object& o, raio::ActorHandle<T>& h) const {
      if (o.type != msgpack::type::BIN || o.via.bin.size != raio::ActorId::kSize) {
        throw msgpack::type_error();
      }
      h = raio::ActorHandle<T>(
          raio::ActorId::FromBinary(std::string_view(o.via.bin.ptr, o.via.bin.size)));
      return o;
    }
  };
  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE
}  // namespace msgpack
