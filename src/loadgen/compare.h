// `tandem bench compare A.json B.json`: the runs of two reports side by side (matched by label,
// e.g. "c=4"), each metric with B/A. Lower is better for latencies, higher for throughputs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::bench {

// InvalidArgument when either is not a `tandem bench` report or no run label is in both.
Result<std::string> CompareReports(const nlohmann::json& a, const nlohmann::json& b,
                                   const std::string& name_a, const std::string& name_b);

}  // namespace tandem::bench
