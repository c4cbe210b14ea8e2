// Online refinement of a worker Profile from what the running deployment measures (issue 27,
// deliverable 1; the "correction factors" of Dynamo's SLA planner, with the queueing this planner
// models). A profile measured by `tandem profile` on an idle worker misjudges a serving pool: the
// serving path adds routing and the KV transfer to TTFT, batching in a busy engine changes the
// step time, and a shared host gives the worker less (or more) of its cores. Each interval the
// planner compares the TTFT and ITL the frontend observed with what the profile predicts for that
// interval's load, and scales the profile's prefill and decode times by the ratio:
//   decode   predicted ITL = Profile::ItlMs(ISL + OSL / 2, b), b = the interval's mean number of
//            requests decoding / decode workers (at least 1; the sum of the interval's inter-token
//            gaps / its length is that mean, Little's law); observed = the interval's mean of
//            tandem_inter_token_latency_seconds; factor = observed / predicted.
//   prefill  with the interval's mean TTFT T, first tokens per second r (the pool's completion
//            rate: the arrival rate misleads while a backlog drains or builds) and n prefill
//            workers: the service time s' for which ReplicaPlanner's M/D/1 queue gives T (T = s'
//            + rho s' / (2 (1 - rho)), rho = r s' / n; T grows with s' on (0, n / r), solved by
//            bisection; r = 0: s' = T); factor = s' / Profile::PrefillMs(uncached prompt). A
//            backlog that the steady-state queue does not explain cannot push s' past n / r, the
//            time at which the pool would be saturated.
// Each interval's factor f_obs moves the running factor f <- f^(1 - alpha) * f_obs^alpha (an EWMA
// of the logarithm, so halving and doubling weigh the same), clamped to [min_factor, max_factor];
// an interval with fewer than min_samples first tokens (prefill) or inter-token gaps (decode), or
// with nothing to compare (no profile time, no workers), or right after that role's worker count
// changed (a starting worker does not serve yet, a draining one still does), leaves that factor as
// it was.
#pragma once

#include <string>

#include "planner/profile.h"

namespace tandem::planner {

struct CorrectionConfig {
  bool enabled = true;
  double alpha = 0.5;        // weight of the newest interval, (0, 1]
  double min_factor = 0.25;  // bounds of both factors
  double max_factor = 4;
  int min_samples = 5;       // first tokens / inter-token gaps an interval needs to count
  // The decode workers prefill prompts with at most this many uncached tokens themselves
  // (--max-local-prefill-tokens): in an interval whose mean uncached prompt is that short, TTFT is
  // the decode workers' and leaves the prefill factor as it was.
  int local_prefill_tokens = 0;
};

// What one interval observed (LoadSample's fields, replica_planner.h).
struct ObservedLatency {
  double first_token_rate = 0;    // first tokens per second over the interval
  double uncached_prompt_tokens = 0;
  double context_tokens = 0;      // ISL + OSL / 2
  double ttft_ms = 0, ttft_count = 0;  // mean TTFT over the interval and how many first tokens
  double itl_ms = 0, itl_count = 0;    // mean inter-token gap and how many gaps
  double mean_decoding = 0;       // requests decoding, the interval's time average
  int prefill_workers = 0, decode_workers = 0;
};

class ProfileCorrection {
 public:
  explicit ProfileCorrection(CorrectionConfig config = {}) : config_(config) {}

  // Updates the factors from one interval; appends what it did to *why.
  void Observe(const Profile& profile, const ObservedLatency& o, std::string* why);

  // Multiply PrefillMs and ItlMs; 1 until an interval moves them (never while disabled).
  double prefill() const { return prefill_; }
  double decode() const { return decode_; }
  const CorrectionConfig& config() const { return config_; }

  // The M/D/1 service time (s) with mean sojourn ttft_s at `rate` arrivals/s on `workers` servers
  // treated as one queue each at rate / workers (see above).
  static double ServiceTimeForTtft(double ttft_s, double rate, int workers);

 private:
  double Update(double f, double observed) const;

  CorrectionConfig config_;
  double prefill_ = 1, decode_ = 1;
  int last_prefill_workers_ = -1, last_decode_workers_ = -1;  // at the previous interval
};

}  // namespace tandem::planner
