// The table of training functions registered with RAIO_TRAIN_FUNCTION: the driver finds a
// function's name by its address, a worker (the same executable) the function by its name.
// Thread-safety: registration runs at static initialization; lookups may run on any thread
// after it (the table is guarded by a mutex).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "raio/train/trainer.h"

namespace raio::train::internal {

// The name `fn` is registered under. FailedPrecondition when it is not registered, or is
// registered under two names (both sites named).
absl::StatusOr<std::string> TrainFunctionName(TrainFunction fn);

// The function registered as `name`. FailedPrecondition when none is (this executable is
// not the driver's, or the registration is missing), or two are.
absl::StatusOr<TrainFunction> FindTrainFunction(const std::string& name);

}  // namespace raio::train::internal
