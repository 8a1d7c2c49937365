// What the API's implementation files share with runtime.cc (not part of the public API).
// Thread-safety: CoreOrThrow is thread-safe.
#pragma once

#include <memory>

#include "raio/worker/core_worker.h"

namespace raio::api {

// The process's core worker (driver or worker), or InvalidUsageError naming `call` and
// why there is none (not initialized, or shut down).
std::shared_ptr<worker::CoreWorker> CoreOrThrow(const char* call);

}  // namespace raio::api
