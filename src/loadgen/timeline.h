// Charts over the run's time for `tandem bench --phases` (SVG, as svg.h): TTFT and ITL of every
// request against its send time, and the replica timeline of a scraped planner (runner.h Scrape),
// each with the phases as shaded bands and the SLO as a dashed line.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "loadgen/phases.h"
#include "loadgen/runner.h"
#include "loadgen/stats.h"

namespace tandem::bench {

struct TimelineSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x: seconds from the run's start, y)
  bool steps = false;  // false: dots (one per request); true: a step line (held to the next point)
};

struct TimelineBand {
  double x0 = 0, x1 = 0;  // seconds
  std::string label;
};

struct TimelineLine {
  double y = 0;
  std::string label;  // e.g. "SLO 500 ms"
};

// One chart: x from 0 to x_max seconds, y linear from 0 or log10 (dots with y <= 0 skipped),
// the bands behind the data, the lines over it. Always a whole SVG document ("no data" inside
// when no series has a point).
std::string TimelineChart(const std::string& title, const std::string& y_label,
                          const std::vector<TimelineSeries>& series, const std::vector<TimelineBand>& bands,
                          const std::vector<TimelineLine>& lines, double x_max, bool log_y);

// Into `dir` (created): ttft_over_time.svg (TTFT in ms of each successful request at its send
// time, failed requests as their own series at the top), itl_over_time.svg (each request's mean
// ITL in ms), and, when the run scraped any of `keys`, replicas_over_time.svg (those series as
// steps). Returns the files written.
Result<std::vector<std::string>> WriteTimelineCharts(const std::string& dir, const RunResult& run,
                                                     const std::vector<PhaseSpec>& phases, const Slo& slo,
                                                     const std::vector<std::string>& keys);

}  // namespace tandem::bench
