// Logging through spdlog. The level comes from config's log_level (RAIO_LOG_LEVEL or
// system_config: trace, debug, info, warn, error, critical, off; auto, the default, is
// warn in drivers, workers and the CLI, info in daemons).
// Thread-safety: spdlog's default logger is thread-safe.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "absl/strings/string_view.h"

// Debian's abseil has its own string_view type (Status::message() returns it): make
// it loggable.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Ctx>
  auto format(absl::string_view s, Ctx& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace raio {

// Applies config::log_level() (`default_level` when it is auto) to the default logger.
// Idempotent.
void InitLogging(spdlog::level::level_enum default_level);

}  // namespace raio

#define RAIO_LOG_DEBUG(...) SPDLOG_DEBUG(__VA_ARGS__)
#define RAIO_LOG_INFO(...) SPDLOG_INFO(__VA_ARGS__)
#define RAIO_LOG_WARN(...) SPDLOG_WARN(__VA_ARGS__)
#define RAIO_LOG_ERROR(...) SPDLOG_ERROR(__VA_ARGS__)

// For true invariants only; input from users or peers gets a Status instead.
#define RAIO_CHECK(cond)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      SPDLOG_CRITICAL("check failed: {} at {}:{}", #cond, __FILE__, __LINE__); \
      std::abort();                                                            \
    }                                                                          \
  } while (0)
