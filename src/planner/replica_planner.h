// ReplicaPlanner: how many prefill and decode workers the next interval needs to meet a TTFT and an
// ITL target (issue 27; the formulas of Dynamo's SLA planner, with queueing added). One call per
// adjustment interval with that interval's load; deterministic given its inputs.
//
// Each interval's observed request rate r (requests/s), mean prompt length ISL, mean output length
// OSL and prefix hit rate h feed one LoadPredictor each (PlannerConfig::predictor); with the
// predicted values and the worker's Profile:
//   prefill   a request's uncached prompt is u = ISL (1 - h) tokens; one prefill takes s =
//             Profile::PrefillMs(u). A worker is a single queue serving prefills one at a time with
//             Poisson arrivals (M/D/1): the mean wait is rho s / (2 (1 - rho)) at utilization rho, so
//             TTFT = s + wait stays within the target T for rho <= rho_max = 2 (T - s) / (2 (T - s) + s).
//             Replicas: ceil(r s / rho_max + q s / interval), where q = the prefill tokens waiting now
//             / u (the backlog, cleared within one interval).
//   decode    a worker keeps its ITL within the target up to B = Profile::MaxBatch(ISL + OSL / 2,
//             target) running requests, at ITL_B = Profile::ItlMs(that context, B); a request there
//             decodes OSL tokens in OSL ITL_B, so Little's law puts r OSL ITL_B requests in decode
//             at once, and never fewer than the requests in the system now (running and waiting,
//             LoadSample::requests_in_flight: a backlog the arrival rate no longer shows, e.g. in a
//             lull after a burst). Replicas: ceil(max(r OSL ITL_B, in flight) / B).
// Then the bounds (min/max per role) and the budget (workers in all: both pools shrink in
// proportion, each at least its minimum). Hysteresis: a larger count applies at once; a smaller one
// only when every plan of the last scale_down_intervals intervals asked for less than the current
// count and cooldown_s passed since the last change, and then to the largest of those asks (no
// oscillation on a noisy rate). Stale or missing metrics (a sample older than stale_after_s, or not
// valid): the planner holds its last decision and says so. Every decision carries its inputs in
// `reason` (for the log and /metrics).
// Online refinement: before the formulas, each valid interval's observed TTFT and ITL update two
// factors (correction.h) that multiply the profile's prefill time s and ITL: s' = s f_prefill, and
// decode uses B = MaxBatch(context, target / f_decode) at ITL_B = ItlMs(context, B) f_decode.
#pragma once

#include <deque>
#include <string>

#include "planner/correction.h"
#include "planner/predictor.h"
#include "planner/profile.h"

namespace tandem::planner {

struct PlannerConfig {
  double ttft_ms = 2000;
  double itl_ms = 100;
  double interval_s = 30;
  int min_prefill = 1, max_prefill = 8;
  int min_decode = 1, max_decode = 8;
  int budget = 0;  // workers in all, 0: no limit beyond the maxima
  PredictorKind predictor = PredictorKind::kConstant;
  int scale_down_intervals = 2;
  double cooldown_s = 60;
  double stale_after_s = 0;  // 0: two intervals
  CorrectionConfig correction;  // online refinement of the profile (correction.h)
};

// One interval's measurements (from the frontend's and workers' metrics).
struct LoadSample {
  bool valid = false;            // false: the metrics could not be read
  double time_s = 0;             // when they were read
  double request_rate = 0;       // requests/s over the interval
  double mean_prompt_tokens = 0;
  double mean_output_tokens = 0;
  double prefix_hit_rate = 0;    // cached prompt tokens / prompt tokens, [0, 1]
  double queued_prefill_tokens = 0;  // prompt tokens waiting for a prefill now
  double requests_in_flight = 0;     // requests running or waiting now (the decode backlog)
  // What the frontend saw over the interval, for the profile's online refinement (correction.h):
  double observed_ttft_ms = 0, ttft_count = 0;  // mean TTFT (ms) and first tokens counted
  double observed_itl_ms = 0, itl_count = 0;    // mean inter-token gap (ms) and gaps counted
  double first_token_rate = 0;                  // first tokens per second over the interval
  double mean_decoding = 0;                     // requests decoding, time-averaged over it
};

struct ReplicaDecision {
  int prefill = 0, decode = 0;
  bool held = false;  // stale or missing metrics: the last decision kept
  std::string reason;
};

class ReplicaPlanner {
 public:
  // InvalidArgument for non-positive targets or interval, bounds with min > max or min < 0.
  static Result<ReplicaPlanner> Create(const PlannerConfig& config, Profile profile);

  // The decision for the next interval given `sample`, the time now and the counts running now.
  ReplicaDecision Plan(const LoadSample& sample, double now_s, int current_prefill, int current_decode);

  // New bounds of a role (the planner loop's answer to a manual replica edit). InvalidArgument as
  // Create for min > max or min < 0; the budget must still fit both minima.
  Status SetBounds(bool prefill, int min_replicas, int max_replicas);
  const PlannerConfig& config() const { return config_; }
  const ProfileCorrection& correction() const { return correction_; }

  // The unconstrained counts of the formulas above for predicted values (for tests and logs).
  int PrefillReplicas(double rate, double uncached_prompt_tokens, double queued_prefill_tokens,
                      std::string* why) const;
  int DecodeReplicas(double rate, double prompt_tokens, double output_tokens, std::string* why,
                     double requests_in_flight = 0) const;

 private:
  ReplicaPlanner(const PlannerConfig& config, Profile profile);
  int Settle(int desired, int current, std::deque<int>* asks, double* last_change_s, double now_s,
             std::string* why);

  PlannerConfig config_;
  Profile profile_;
  ProfileCorrection correction_;
  LoadPredictor rate_, prompt_, output_, hit_;
  std::deque<int> prefill_asks_, decode_asks_;  // the last scale_down_intervals desired counts
  double last_prefill_change_s_ = -1e30, last_decode_change_s_ = -1e30;
  ReplicaDecision last_;
  bool has_last_ = false;
};

}  // namespace tandem::planner
