// What the SLA planner measures each interval, from the frontend's /metrics (frontend/
// openai_metrics.h): two readings of its counters a planner interval apart make one LoadSample
// (replica_planner.h).
//   request_rate          delta tandem_generation_requests_total / delta t (arrivals per second)
//   mean_prompt_tokens    delta tandem_prompt_tokens_total / delta tandem_request_duration_seconds_count
//   mean_output_tokens    delta tandem_generation_tokens_total / the same (finished requests; with
//                         n > 1 the tokens of every choice count, so the means are per request)
//   prefix_hit_rate       delta tandem_prefix_cache_hits_total / delta tandem_prefix_cache_queries_total
//   queued_prefill_tokens tandem_prompt_tokens_before_first_token now (the prefill backlog)
//   requests_in_flight    tandem_num_requests_running + tandem_num_requests_waiting now (0 when
//                         the frontend has no engine gauges)
//   observed_ttft_ms      delta tandem_time_to_first_token_seconds_sum / delta its _count (ms), and
//   ttft_count            that count delta (0 and 0 when no first token came in the interval);
//   first_token_rate      that count delta / delta t
//   observed_itl_ms       the same of tandem_inter_token_latency_seconds, itl_count its count delta;
//   mean_decoding         its sum's delta / delta t (every decoding request adds its gaps: the time
//                         average of the requests decoding)
// A histogram whose sum or count went down (the frontend restarted) counts both from zero.
// A counter that went down (the frontend restarted) counts from zero, as Prometheus' rate() does.
// An interval in which no request finished keeps the previous sample's means and hit rate.
#pragma once

#include <vector>

#include "common/status.h"
#include "planner/prom_text.h"
#include "planner/replica_planner.h"

namespace tandem::planner {

struct FrontendReading {
  double time_s = 0;
  double requests = 0;           // tandem_generation_requests_total
  double finished = 0;           // tandem_request_duration_seconds_count
  double prompt_tokens = 0;      // tandem_prompt_tokens_total
  double generation_tokens = 0;  // tandem_generation_tokens_total
  double cache_queries = 0, cache_hits = 0;
  double backlog_tokens = 0;     // tandem_prompt_tokens_before_first_token
  double in_flight = 0;          // tandem_num_requests_running + tandem_num_requests_waiting
  double ttft_sum = 0, ttft_count = 0;  // tandem_time_to_first_token_seconds_{sum,count}
  double itl_sum = 0, itl_count = 0;    // tandem_inter_token_latency_seconds_{sum,count}
};

// NotFound naming the metric when tandem_generation_requests_total or
// tandem_prompt_tokens_before_first_token is missing (a frontend older than the planner).
Result<FrontendReading> ReadFrontend(const std::vector<PromSample>& samples, double time_s);

// The interval from `prev` to `now` (now.time_s > prev.time_s, else an invalid sample). `last`:
// the previous interval's sample (its means are kept when nothing finished), or nullptr.
LoadSample MeterInterval(const FrontendReading& prev, const FrontendReading& now, const LoadSample* last);

}  // namespace tandem::planner
