// The `planner:` section of a deployment graph (graph.h): the SLA planner (planner/) that sizes
// the graph's prefill and decode groups to TTFT and ITL targets while `tandem serve` runs it.
//
//   planner:
//     profile: profile.json          # required: `tandem profile`'s JSON for this model and device
//                                    # (relative to the graph file)
//     ttft_ms: 2000                  # targets (> 0)
//     itl_ms: 100
//     interval_s: 30                 # one decision per interval (> 0)
//     prefill: {min: 1, max: 4}      # replica bounds per role (0 <= min <= max <= 1024)
//     decode: {min: 1, max: 4}
//     budget: 6                      # workers in all (0: no limit beyond the maxima)
//     predictor: constant            # constant | ewma | linear-trend
//     scale_down_intervals: 2        # a scale-down needs this many intervals asking for it
//     cooldown_s: 60                 # and this long since the role's last change
//     drain_timeout_s: 30            # a worker taken out waits this long for its requests
//                                    # (every worker gets --drain-timeout-s)
//     metrics_port: 0                # N: serve the planner's /metrics there (0: not served)
//     correction: true               # refine the profile online from the observed TTFT and ITL
//                                    # (planner/correction.h); false: the profile as measured
//
// Rules (InvalidArgument): the graph has exactly one prefill and one decode group and no agg group;
// each group's replicas within its bounds; a group with one device per replica cannot grow past
// its devices; fixed ports must not collide up to the maxima.
#pragma once

#include <string>

namespace YAML {
class Node;
}

namespace tandem::runtime {

class YamlFields;

struct GraphPlanner {
  bool enabled = false;
  std::string profile;  // absolute
  double ttft_ms = 2000, itl_ms = 100, interval_s = 30;
  int min_prefill = 1, max_prefill = 4, min_decode = 1, max_decode = 4;
  int budget = 0;
  std::string predictor = "constant";
  int scale_down_intervals = 2;
  double cooldown_s = 60;
  double drain_timeout_s = 30;
  int metrics_port = 0;
  bool correction = true;
  int line = 0;
};

// Throws YamlFieldError (through `fields`) as the rest of the parser does.
GraphPlanner ParsePlannerSection(const YamlFields& fields, const YAML::Node& n, const std::string& base_dir);

}  // namespace tandem::runtime
