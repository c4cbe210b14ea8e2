// Logging: spdlog behind tandem's own names so the backend can change in one place.
#pragma once

#include <spdlog/spdlog.h>

namespace tandem::log {

// Level from TANDEM_LOG_LEVEL (trace, debug, info, warn, error, off); default info, on stderr.
void Init();

using spdlog::debug;
using spdlog::error;
using spdlog::info;
using spdlog::trace;
using spdlog::warn;

}  // namespace tandem::log
