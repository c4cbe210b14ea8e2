#include "planner/replica_planner.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace tandem::planner {

Result<ReplicaPlanner> ReplicaPlanner::Create(const PlannerConfig& c, Profile profile) {
  if (!(c.ttft_ms > 0) || !(c.itl_ms > 0) || !(c.interval_s > 0)) {
    return Status(StatusCode::kInvalidArgument, "planner: ttft, itl and interval must be positive");
  }
  if (c.min_prefill < 0 || c.min_decode < 0 || c.min_prefill > c.max_prefill || c.min_decode > c.max_decode) {
    return Err(StatusCode::kInvalidArgument, "planner: replica bounds prefill [{}, {}] decode [{}, {}]",
               c.min_prefill, c.max_prefill, c.min_decode, c.max_decode);
  }
  if (c.budget < 0 || (c.budget > 0 && c.budget < c.min_prefill + c.min_decode)) {
    return Err(StatusCode::kInvalidArgument, "planner: a budget of {} workers is below the minima", c.budget);
  }
  if (profile.prefill.empty() || profile.decode.empty()) {
    return Status(StatusCode::kInvalidArgument, "planner: the profile has no prefill or no decode points");
  }
  return ReplicaPlanner(c, std::move(profile));
}

ReplicaPlanner::ReplicaPlanner(const PlannerConfig& c, Profile profile)
    : config_(c),
      profile_(std::move(profile)),
      correction_(c.correction),
      rate_(c.predictor),
      prompt_(c.predictor),
      output_(c.predictor),
      hit_(c.predictor) {
  if (config_.stale_after_s <= 0) config_.stale_after_s = 2 * config_.interval_s;
}

int ReplicaPlanner::PrefillReplicas(double rate, double uncached, double queued_tokens, std::string* why) const {
  const double s = profile_.PrefillMs(uncached) * correction_.prefill() / 1000.0;  // seconds for one prefill
  const double target = config_.ttft_ms / 1000.0;
  double rho_max;
  if (s <= 0) {
    rho_max = 1;
  } else if (s >= target) {  // even an idle worker misses the target: run as lightly loaded as allowed
    rho_max = 0.05;
    *why += fmt::format(" (TTFT target {:.0f} ms below one prefill's {:.0f} ms)", config_.ttft_ms, s * 1000);
  } else {
    rho_max = 2 * (target - s) / (2 * (target - s) + s);
  }
  const double backlog = uncached > 0 ? queued_tokens / uncached : 0;
  const double need = rate * s / rho_max + backlog * s / config_.interval_s;
  *why += fmt::format(" prefill: {:.0f} ms each, rho_max {:.2f}, backlog {:.1f} -> {:.2f} workers", s * 1000,
                      rho_max, backlog, need);
  return static_cast<int>(std::ceil(need - 1e-9));
}

int ReplicaPlanner::DecodeReplicas(double rate, double prompt, double output, std::string* why,
                                   double in_flight) const {
  const double context = prompt + output / 2;
  const double f = correction_.decode();
  const double per_worker = profile_.MaxBatch(context, config_.itl_ms / f);
  if (per_worker <= 0) {
    *why += fmt::format("; decode: ITL target {:.0f} ms (the profile's {:.0f} after the correction) below one "
                        "request's at context {:.0f}", config_.itl_ms, config_.itl_ms / f, context);
    return rate > 0 && output > 0 ? config_.max_decode : 0;
  }
  const double itl = std::max(1e-6, profile_.ItlMs(context, per_worker) * f) / 1000.0;  // <= the target
  // Little's law at the ITL of a full worker, and at least what is in the system now.
  const double in_decode = std::max(rate * output * itl, in_flight);
  const double need = in_decode / per_worker;
  *why += fmt::format("; decode: {:.1f} requests at once ({:.0f} in flight), {:.1f} per worker at {:.1f} ms -> "
                      "{:.2f} workers",
                      in_decode, in_flight, per_worker, itl * 1000, need);
  return static_cast<int>(std::ceil(need - 1e-9));
}

int ReplicaPlanner::Settle(int desired, int current, std::deque<int>* asks, double* last_change_s,
                           double now_s, std::string* why) {
  asks->push_back(desired);
  while (static_cast<int>(asks->size()) > std::max(1, config_.scale_down_intervals)) asks->pop_front();
  if (desired >= current) {
    if (desired > current) *last_change_s = now_s;
    return desired;
  }
  const bool steady = static_cast<int>(asks->size()) >= std::max(1, config_.scale_down_intervals) &&
                      std::all_of(asks->begin(), asks->end(), [&](int a) { return a < current; });
  if (!steady || now_s - *last_change_s < config_.cooldown_s) {
    *why += " (scale-down held: hysteresis/cool-down)";
    return current;
  }
  *last_change_s = now_s;
  return *std::max_element(asks->begin(), asks->end());
}

ReplicaDecision ReplicaPlanner::Plan(const LoadSample& sample, double now_s, int current_prefill,
                                     int current_decode) {
  ReplicaDecision d;
  if (!sample.valid || now_s - sample.time_s > config_.stale_after_s) {
    d = has_last_ ? last_ : ReplicaDecision{current_prefill, current_decode, false, ""};
    d.held = true;
    d.reason = !sample.valid ? "metrics missing: holding the last decision"
                             : fmt::format("metrics {:.0f} s old: holding the last decision", now_s - sample.time_s);
    return d;
  }
  rate_.Observe(sample.request_rate);
  prompt_.Observe(sample.mean_prompt_tokens);
  output_.Observe(sample.mean_output_tokens);
  hit_.Observe(std::clamp(sample.prefix_hit_rate, 0.0, 1.0));
  const double rate = rate_.Predict(), prompt = prompt_.Predict(), output = output_.Predict();
  const double hit = std::clamp(hit_.Predict(), 0.0, 1.0);
  std::string why;
  ObservedLatency observed;
  observed.first_token_rate = sample.first_token_rate;
  observed.uncached_prompt_tokens = sample.mean_prompt_tokens * (1 - std::clamp(sample.prefix_hit_rate, 0.0, 1.0));
  observed.context_tokens = sample.mean_prompt_tokens + sample.mean_output_tokens / 2;
  observed.ttft_ms = sample.observed_ttft_ms;
  observed.ttft_count = sample.ttft_count;
  observed.itl_ms = sample.observed_itl_ms;
  observed.itl_count = sample.itl_count;
  observed.mean_decoding = sample.mean_decoding;
  observed.prefill_workers = current_prefill;
  observed.decode_workers = current_decode;
  correction_.Observe(profile_, observed, &why);
  why += fmt::format(" predicted ({}) {:.2f} req/s, prompt {:.0f}, output {:.0f}, prefix hit {:.0f}%;",
                     PredictorName(config_.predictor), rate, prompt, output, 100 * hit);
  int p = PrefillReplicas(rate, prompt * (1 - hit), sample.queued_prefill_tokens, &why);
  int dc = DecodeReplicas(rate, prompt, output, &why, sample.requests_in_flight);
  p = std::clamp(p, config_.min_prefill, config_.max_prefill);
  dc = std::clamp(dc, config_.min_decode, config_.max_decode);
  if (config_.budget > 0 && p + dc > config_.budget) {
    const int total = p + dc;
    const int np = std::clamp(static_cast<int>(std::floor(static_cast<double>(config_.budget) * p / total)),
                              config_.min_prefill, config_.budget - config_.min_decode);
    why += fmt::format("; budget {}: {} + {} -> {} + {}", config_.budget, p, dc, np, config_.budget - np);
    p = np;
    dc = config_.budget - np;
  }
  d.prefill = Settle(p, current_prefill, &prefill_asks_, &last_prefill_change_s_, now_s, &why);
  d.decode = Settle(dc, current_decode, &decode_asks_, &last_decode_change_s_, now_s, &why);
  if (config_.budget > 0 && d.prefill + d.decode > config_.budget) {  // the budget is never exceeded
    why += "; the budget overrides the scale-down hold";
    d.prefill = p;
    d.decode = dc;
    last_prefill_change_s_ = last_decode_change_s_ = now_s;
  }
  const size_t start = why.find_first_not_of(' ');
  d.reason = start == std::string::npos ? std::string() : why.substr(start);
  last_ = d;
  has_last_ = true;
  return d;
}

Status ReplicaPlanner::SetBounds(bool prefill, int min_replicas, int max_replicas) {
  if (min_replicas < 0 || min_replicas > max_replicas) {
    return Err(StatusCode::kInvalidArgument, "planner: {} bounds {}..{}", prefill ? "prefill" : "decode",
               min_replicas, max_replicas);
  }
  const int other_min = prefill ? config_.min_decode : config_.min_prefill;
  if (config_.budget > 0 && min_replicas + other_min > config_.budget) {
    return Err(StatusCode::kInvalidArgument, "planner: {} minimum {} and the other role's {} exceed "
               "the budget {}", prefill ? "prefill" : "decode", min_replicas, other_min, config_.budget);
  }
  (prefill ? config_.min_prefill : config_.min_decode) = min_replicas;
  (prefill ? config_.max_prefill : config_.max_decode) = max_replicas;
  return Status::Ok();
}

}  // namespace tandem::planner
