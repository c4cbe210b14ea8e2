// The SLA planner at work (issue 27): every interval it reads the frontend's /metrics, meters the
// interval (load_meter.h), asks the ReplicaPlanner for prefill and decode counts and hands them to
// a ScaleConnector: the local one starts and stops worker processes under `tandem serve`
// (deploy/local_connector.h), the Kubernetes one patches the Deployments' scale.
//
// A manual edit (the connector reports counts the planner did not ask for, e.g. `kubectl scale`)
// is respected as a new bound, not fought: a count above the planner's last one becomes that
// role's minimum, one below it the maximum (logged).
//
// Metrics (on the registry given; `tandem serve` serves them with --planner-metrics-port):
//   tandem_planner_desired_replicas{role}       gauge: the last decision
//   tandem_planner_current_replicas{role}       gauge: what the connector reported
//   tandem_planner_request_rate                 gauge: the last interval's arrivals per second
//   tandem_planner_mean_prompt_tokens, tandem_planner_mean_output_tokens, tandem_planner_prefix_hit_rate,
//   tandem_planner_queued_prefill_tokens, tandem_planner_requests_in_flight  gauges: its other inputs
//   tandem_planner_profile_correction{role}     gauge: the factor on the profile's prefill time /
//                                               ITL (planner/correction.h; 1 when turned off)
//   tandem_planner_decisions_total{outcome}     counter: "scaled", "unchanged", "held"
//   tandem_planner_errors_total{source}         counter: "metrics" (a failed scrape), "connector"
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/metrics.h"
#include "common/status.h"
#include "planner/load_meter.h"
#include "planner/replica_planner.h"

namespace tandem::planner {

struct RoleCounts {
  int prefill = 0, decode = 0;
  bool operator==(const RoleCounts&) const = default;
};

class ScaleConnector {
 public:
  virtual ~ScaleConnector() = default;
  virtual std::string name() const = 0;
  // The workers of each role the deployment is meant to have now (starting ones included, ones
  // being drained for a scale-down not).
  virtual Result<RoleCounts> Current() = 0;
  // Asks for these counts. A scale-down drains first: the worker leaves discovery, its requests
  // finish (or migrate), then it stops.
  virtual Status Apply(const RoleCounts& want) = 0;
};

struct PlannerLoopOptions {
  double interval_s = 30;
  // The frontend's /metrics text (e.g. HttpGet); an error holds the decision (stale metrics).
  std::function<Result<std::string>()> scrape;
};

class PlannerLoop {
 public:
  // `connector` and `registry` (may be null) must outlive the loop.
  PlannerLoop(ReplicaPlanner planner, ScaleConnector* connector, PlannerLoopOptions options,
              metrics::Registry* registry);
  ~PlannerLoop();  // Stop()

  // A thread: the baseline reading at once, then Step every interval until Stop.
  void Start();
  void Stop();

  // One interval at now_s (seconds on any steady clock): read the frontend, meter against the
  // previous reading, plan, apply. The first successful reading is only the baseline (nullopt).
  std::optional<ReplicaDecision> Step(double now_s);

 private:
  void Run();
  void Export(const LoadSample& s, const RoleCounts& current, const ReplicaDecision& d);

  ReplicaPlanner planner_;
  ScaleConnector* connector_;
  PlannerLoopOptions options_;
  metrics::Registry* registry_;
  std::optional<FrontendReading> prev_;
  std::optional<LoadSample> last_sample_;
  std::optional<RoleCounts> last_applied_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tandem::planner
