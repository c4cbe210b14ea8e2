#include "planner/load_meter.h"

#include <utility>

namespace tandem::planner {
namespace {

// A counter's increase; a reset (the value went down) counts from zero.
double Delta(double prev, double now) { return now >= prev ? now - prev : now; }

// A histogram's (sum, count) increase: both from zero when either went down (a restart; the two
// deltas must describe the same observations).
std::pair<double, double> HistogramDelta(double prev_sum, double prev_count, double sum, double count) {
  if (sum < prev_sum || count < prev_count) return {sum, count};
  return {sum - prev_sum, count - prev_count};
}

}  // namespace

Result<FrontendReading> ReadFrontend(const std::vector<PromSample>& samples, double time_s) {
  for (const char* name : {"tandem_generation_requests_total", "tandem_prompt_tokens_before_first_token"}) {
    bool found = false;
    for (const PromSample& s : samples) found = found || s.name == name;
    if (!found) {
      return Err(StatusCode::kNotFound, "the frontend's /metrics has no {} (a frontend older than "
                 "the planner?)", name);
    }
  }
  FrontendReading r;
  r.time_s = time_s;
  r.requests = SumSamples(samples, "tandem_generation_requests_total");
  r.finished = SumSamples(samples, "tandem_request_duration_seconds_count");
  r.prompt_tokens = SumSamples(samples, "tandem_prompt_tokens_total");
  r.generation_tokens = SumSamples(samples, "tandem_generation_tokens_total");
  r.cache_queries = SumSamples(samples, "tandem_prefix_cache_queries_total");
  r.cache_hits = SumSamples(samples, "tandem_prefix_cache_hits_total");
  r.backlog_tokens = SumSamples(samples, "tandem_prompt_tokens_before_first_token");
  r.in_flight = SumSamples(samples, "tandem_num_requests_running") + SumSamples(samples, "tandem_num_requests_waiting");
  r.ttft_sum = SumSamples(samples, "tandem_time_to_first_token_seconds_sum");
  r.ttft_count = SumSamples(samples, "tandem_time_to_first_token_seconds_count");
  r.itl_sum = SumSamples(samples, "tandem_inter_token_latency_seconds_sum");
  r.itl_count = SumSamples(samples, "tandem_inter_token_latency_seconds_count");
  return r;
}

LoadSample MeterInterval(const FrontendReading& prev, const FrontendReading& now, const LoadSample* last) {
  LoadSample s;
  s.time_s = now.time_s;
  const double dt = now.time_s - prev.time_s;
  if (!(dt > 0)) return s;  // not valid
  s.valid = true;
  s.request_rate = Delta(prev.requests, now.requests) / dt;
  s.queued_prefill_tokens = now.backlog_tokens > 0 ? now.backlog_tokens : 0;
  s.requests_in_flight = now.in_flight > 0 ? now.in_flight : 0;
  const auto [ttft_sum, ttft_count] = HistogramDelta(prev.ttft_sum, prev.ttft_count, now.ttft_sum, now.ttft_count);
  s.ttft_count = ttft_count;
  s.first_token_rate = ttft_count / dt;
  if (ttft_count > 0) s.observed_ttft_ms = 1000 * ttft_sum / ttft_count;
  const auto [itl_sum, itl_count] = HistogramDelta(prev.itl_sum, prev.itl_count, now.itl_sum, now.itl_count);
  s.itl_count = itl_count;
  s.mean_decoding = itl_sum / dt;
  if (itl_count > 0) s.observed_itl_ms = 1000 * itl_sum / itl_count;
  const double finished = Delta(prev.finished, now.finished);
  if (finished > 0) {
    s.mean_prompt_tokens = Delta(prev.prompt_tokens, now.prompt_tokens) / finished;
    s.mean_output_tokens = Delta(prev.generation_tokens, now.generation_tokens) / finished;
  } else if (last != nullptr) {
    s.mean_prompt_tokens = last->mean_prompt_tokens;
    s.mean_output_tokens = last->mean_output_tokens;
  }
  const double queries = Delta(prev.cache_queries, now.cache_queries);
  if (queries > 0) {
    s.prefix_hit_rate = Delta(prev.cache_hits, now.cache_hits) / queries;
  } else if (last != nullptr) {
    s.prefix_hit_rate = last->prefix_hit_rate;
  }
  return s;
}

}  // namespace tandem::planner
