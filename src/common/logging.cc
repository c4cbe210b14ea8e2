#include "common/logging.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace tandem::log {

void Init() {
  static bool done = false;
  if (done) return;
  done = true;
  auto logger = spdlog::stderr_color_mt("tandem");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_default_logger(logger);
  if (const char* level = std::getenv("TANDEM_LOG_LEVEL")) {
    spdlog::set_level(spdlog::level::from_str(level));
  } else {
    spdlog::set_level(spdlog::level::info);
  }
}

}  // namespace tandem::log
