#include "raio/common/logging.h"

#include <string>

namespace raio {

void InitLogging(spdlog::level::level_enum default_level) {
  auto level = default_level;
  if (const char* env = std::getenv("RAIO_LOG_LEVEL")) {
    level = spdlog::level::from_str(env);
  }
  spdlog::set_level(level);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] [raio pid %P] %v");
}

}  // namespace raio
