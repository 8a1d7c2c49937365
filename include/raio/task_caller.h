// raio::Task(f): builds and submits a remote call of a registered free function.
//
//   raio::ObjectRef<int> r = raio::Task(Add).SetResource("CPU", 0.5).Remote(1, 2);
//
// Arguments are checked against f's parameters at compile time. Each argument may be a
// value convertible to the parameter type, an ObjectRef<P> for parameter type P, or a
// std::vector<ObjectRef<U>> for a std::vector<U> parameter; refs are resolved to their
// values before the task runs (a failed ref fails the task with the same error).
// Thread-safety: a TaskCaller is a builder for one thread; Remote() may be called from
// many threads on distinct builders.
#pragma once

#include <cmath>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "raio/errors.h"
#include "raio/internal/returns.h"
#include "raio/internal/runtime.h"
#include "raio/object_ref.h"
#include "raio/placement_group.h"
#include "raio/remote.h"
#include "raio/serialization.h"

namespace raio {
namespace internal {

// Whether AD is std::vector<ObjectRef<U>> and PD is std::vector<U>.
template <typename PD, typename AD>
struct IsRefListFor : std::false_type {};
template <typename U>
struct IsRefListFor<std::vector<U>, std::vector<ObjectRef<U>>> : std::true_type {};

// Whether an argument of type A may be passed for parameter type P.
template <typename P, typename A>
constexpr bool ArgMatches() {
  using PD = std::decay_t<P>;
  using AD = std::decay_t<A>;
  if constexpr (IsObjectRef<AD>::value) {
    // ObjectRef<T> for T (resolved to the value), or for ObjectRef<T> (passed as a ref).
    return std::is_same_v<typename AD::ValueType, PD> || std::is_same_v<AD, PD>;
  } else if constexpr (IsRefListFor<PD, AD>::value) {
    return true;
  } else {
    return std::is_convertible_v<A, PD>;
  }
}

template <typename P, typename A>
TaskArg MakeArg(A&& arg) {
  using PD = std::decay_t<P>;
  using AD = std::decay_t<A>;
  TaskArg out;
  if constexpr (IsObjectRef<AD>::value && !std::is_same_v<AD, PD>) {
    out.kind = TaskArg::Kind::kObjectRef;
    out.refs.push_back(arg.ID());
  } else if constexpr (IsRefListFor<PD, AD>::value) {
    out.kind = TaskArg::Kind::kObjectRefList;
    out.refs.reserve(arg.size());
    for (const auto& ref : arg) out.refs.push_back(ref.ID());
  } else {
    ContainedRefs contained;  // ObjectRefs inside a by-value argument live until the task ends
    if constexpr (std::is_same_v<AD, PD>) {
      out.value = Encode(arg);
    } else {
      out.value = Encode(static_cast<PD>(std::forward<A>(arg)));
    }
    out.contained = contained.Take();
  }
  return out;
}

}  // namespace internal

template <typename F>
class TaskCaller;

template <typename R, typename... P>
class TaskCaller<R (*)(P...)> {
 public:
  explicit TaskCaller(R (*fn)(P...)) : fn_(fn) {}

  // Replaces the whole resource demand, e.g. {{"CPU", 2}, {"GPU", 0.5}, {"memory", 1e9}}.
  // Units: CPU and GPU in devices (GPU fractions below 1 share one device; above 1 must
  // be whole), memory in bytes. Values must be finite and >= 0 (checked at Remote()).
  TaskCaller& SetResources(const std::map<std::string, double>& resources) {
    options_.resources = resources;
    return *this;
  }
  // Sets one resource of the demand (default demand: {"CPU": 1}).
  TaskCaller& SetResource(const std::string& name, double amount) {
    options_.resources[name] = amount;
    return *this;
  }
  // Where the task may run (see raio/scheduling.h) [SchedulingStrategy::Default()].
  TaskCaller& SetSchedulingStrategy(const SchedulingStrategy& strategy) {
    options_.strategy = strategy;
    return *this;
  }
  // Node labels the task needs, key -> "v", "!v", "in(a,b)" or "!in(a,b)" (see
  // raio/scheduling.h); a malformed entry throws InvalidUsageError at Remote() [none].
  // Runs the task in bundle `bundle_index` of `pg` (-1: any bundle; see
  // raio/placement_group.h): its demand comes out of that bundle's resources. It waits
  // while the group is pending, and fails at Get with UnschedulableError once the group is
  // removed. With `capture_child_tasks`, the tasks and actors it submits go into the same
  // group (any bundle) unless they name one or ask for another placement (a scheduling
  // strategy other than DEFAULT, a label selector). Throws InvalidUsageError for an empty
  // group or an index outside [-1, number of bundles); Remote() throws InvalidUsageError
  // when a strategy other than DEFAULT or a label selector is set too (the bundle decides
  // the node).
  TaskCaller& SetPlacementGroup(const PlacementGroup& pg, int bundle_index = -1,
                                bool capture_child_tasks = false) {
    internal::CheckBundleIndex(pg, bundle_index);
    options_.placement_group_id = pg.GetID();
    options_.placement_bundle_index = bundle_index;
    options_.placement_bundles =
        bundle_index < 0
            ? pg.GetBundles()
            : std::vector<std::map<std::string, double>>{pg.GetBundles()[bundle_index]};
    options_.placement_group_capture_child_tasks = capture_child_tasks;
    return *this;
  }

  TaskCaller& SetLabelSelector(const std::map<std::string, std::string>& selector) {
    options_.label_selector = selector;
    return *this;
  }
  // A name shown in errors and `raio status` instead of the function's name.
  TaskCaller& SetName(const std::string& name) {
    options_.name = name;
    return *this;
  }
  // How many times the task is re-run when its worker process dies (default 3; 0 = never;
  // -1 = unlimited, as in Ray).
  // Exceptions thrown by the function are not retried.
  TaskCaller& SetMaxRetries(int max_retries) {
    options_.max_retries = max_retries;
    return *this;
  }

  // Submits the task and returns at once with a reference to its result.
  // Throws InvalidUsageError if the function is not registered with RAIO_REMOTE, raio is
  // not initialized (or shut down), or a resource amount is negative or not finite;
  // ObjectStoreFullError if a by-value argument is larger than one object may be (the
  // object store's capacity less 64 bytes; arguments of 100 KiB or more go to the store):
  // the message names the argument, the function, the size and the limit. A demand no
  // node can meet is reported at Get() as UnschedulableError.
  // A function returning std::tuple<T...> gives std::tuple<ObjectRef<T>...>: one object
  // per element (raio/internal/returns.h).
  template <typename... A>
  internal::RemoteResult<R> Remote(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "wrong number of arguments for this function");
    static_assert((internal::ArgMatches<P, A>() && ...),
                  "an argument's type does not match the function's parameter type "
                  "(pass a value convertible to it, ObjectRef<T> for T, or "
                  "std::vector<ObjectRef<T>> for std::vector<T>)");
    const std::string& name =
        internal::ResolveFunctionName(reinterpret_cast<const void*>(internal::KeyOf(fn_)));
    std::vector<internal::TaskArg> task_args;
    task_args.reserve(sizeof...(A));
    (task_args.push_back(internal::MakeArg<P>(std::forward<A>(args))), ...);
    internal::TaskOptions options = options_;
    options.num_returns = internal::ReturnsOf<R>::kCount;
    return internal::AdoptReturns<R>(internal::SubmitTask(name, std::move(task_args), options));
  }

 private:
  R (*fn_)(P...);
  internal::TaskOptions options_;
};

// Starts building a remote call of `fn`, which must be registered with RAIO_REMOTE.
template <typename R, typename... P>
TaskCaller<R (*)(P...)> Task(R (*fn)(P...)) {
  return TaskCaller<R (*)(P...)>(fn);
}

}  // namespace raio
