#include "raio/common/logging.h"

#include <string>

#include "raio/common/config.h"

namespace raio {

static_assert(static_cast<int>(config::LogLevel::kTrace) == spdlog::level::trace &&
                  static_cast<int>(config::LogLevel::kOff) == spdlog::level::off,
              "config::LogLevel numbers spdlog's levels");

void InitLogging(spdlog::level::level_enum default_level) {
  auto level = default_level;
  if (config::LogLevel configured = config::log_level(); configured != config::LogLevel::kAuto) {
    level = static_cast<spdlog::level::level_enum>(static_cast<int>(configured));
  }
  spdlog::set_level(level);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [raio pid %P] %v");
}

}  // namespace raio
