#include "raio/train/registry.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace raio::train {
namespace {

struct Entry {
  std::string name;
  TrainFunction fn;
  std::string site;
};

struct Registry {
  absl::Mutex mu;
  std::vector<Entry> entries ABSL_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static auto* registry = new Registry();  // never destroyed: used by static initializers
  return *registry;
}

// FailedPrecondition naming the sites when `matches` holds more than one entry.
absl::Status Ambiguous(const std::vector<Entry>& matches, const std::string& what) {
  std::string sites;
  for (const Entry& e : matches) absl::StrAppend(&sites, sites.empty() ? "" : ", ", e.site);
  return absl::FailedPreconditionError(
      absl::StrCat(what, " is registered more than once with RAIO_TRAIN_FUNCTION: at ", sites));
}

}  // namespace

bool RegisterTrainFunction(const std::string& name, TrainFunction fn, const std::string& site) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  r.entries.push_back(Entry{name, fn, site});
  return true;
}

namespace internal {

absl::StatusOr<std::string> TrainFunctionName(TrainFunction fn) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  std::vector<Entry> matches;
  for (const Entry& e : r.entries) {
    if (e.fn == fn) matches.push_back(e);
  }
  if (matches.empty()) {
    return absl::FailedPreconditionError(
        "the training function is not registered: add RAIO_TRAIN_FUNCTION(<function>) at "
        "namespace scope in a .cc file of the program, so that its workers find it by name");
  }
  if (matches.size() > 1) return Ambiguous(matches, "the training function");
  for (const Entry& e : r.entries) {
    if (e.name == matches[0].name && e.fn != fn) {
      return Ambiguous({matches[0], e}, absl::StrCat("the name \"", e.name, "\""));
    }
  }
  return matches[0].name;
}

absl::StatusOr<TrainFunction> FindTrainFunction(const std::string& name) {
  Registry& r = GetRegistry();
  absl::MutexLock lock(&r.mu);
  std::vector<Entry> matches;
  for (const Entry& e : r.entries) {
    if (e.name == name) matches.push_back(e);
  }
  if (matches.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no training function \"", name,
                     "\" is registered in this worker's executable (RAIO_TRAIN_FUNCTION)"));
  }
  if (matches.size() > 1) return Ambiguous(matches, absl::StrCat("the name \"", name, "\""));
  return matches[0].fn;
}

}  // namespace internal
}  // namespace raio::train
