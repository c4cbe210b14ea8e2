// Reading the Prometheus text exposition format (version 0.0.4, as the frontend's and workers'
// /metrics serve it; https://prometheus.io/docs/instrumenting/exposition_formats/): one sample per
// line, `name{label="value",...} value [timestamp]`; `#` lines (HELP, TYPE, comments) and blank
// lines skipped. Label values unescape \\, \" and \n; values are floats ("+Inf", "-Inf", "NaN"
// included). The planner reads the counters and gauges it needs from these samples.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::planner {

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// InvalidArgument "line N: ..." for a line that is not a sample (a bad name, an unterminated label
// value, a value that is not a number).
Result<std::vector<PromSample>> ParsePromText(std::string_view text);

// The sum of the values of the samples named `name` whose labels include every pair of `match`
// (0 when none matches).
double SumSamples(const std::vector<PromSample>& samples, std::string_view name,
                  const std::map<std::string, std::string>& match = {});

}  // namespace tandem::planner
