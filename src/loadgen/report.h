// Reports of a benchmark: the console table (GitHub markdown, so it can be pasted as is), JSON
// (config, per-run summary and every request), CSV (one row per run) and SVG charts.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "loadgen/runner.h"
#include "loadgen/stats.h"

namespace tandem::bench {

// The markdown table of the runs plus lines for errors and token count checks.
std::string FormatTable(const std::vector<RunSummary>& summaries);

nlohmann::json SummaryToJson(const RunSummary& s);
// {"tool": "tandem bench", "version": 1, "config": config, "runs": [summary + "requests"]}.
nlohmann::json ReportToJson(const nlohmann::json& config, const std::vector<RunResult>& runs,
                            const std::vector<RunSummary>& summaries);

std::string FormatCsv(const std::vector<RunSummary>& summaries);

// Into `dir` (created): latency_vs_throughput.svg (TTFT, TPOT, ITL and E2E percentiles against
// output tokens/s, one point per run), ttft_hist_<run>.svg and itl_hist_<run>.svg per run.
// Returns the files written.
Result<std::vector<std::string>> WriteSvgCharts(const std::string& dir,
                                                const std::vector<RunResult>& runs,
                                                const std::vector<RunSummary>& summaries);

Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace tandem::bench
