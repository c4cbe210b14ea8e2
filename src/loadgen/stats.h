// Metrics of a run, as vLLM's `bench serve` and genai-perf define them:
//   TTFT  send -> first non-empty content chunk
//   ITL   gaps between consecutive content chunks (all requests' gaps pooled)
//   TPOT  per request (e2e - ttft) / (completion_tokens - 1), requests with > 1 output token
//   E2E   send -> end of the stream
// Successful requests only; throughputs divide by the run's duration (first send to last
// completion). Goodput: successful requests per second that meet every SLO given; an `itl` SLO is
// met when the request's mean ITL is within it (its worst gap would punish one scheduler stall).
// Percentiles interpolate linearly between order statistics (numpy's default).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "loadgen/record.h"
#include "loadgen/runner.h"

namespace tandem::bench {

struct Distribution {
  size_t count = 0;
  double mean = 0, stddev = 0, min = 0, max = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0;
};
// q in [0, 100]; `sorted` ascending, not empty.
double Percentile(const std::vector<double>& sorted, double q);
Distribution Summarize(std::vector<double> values);

// SLO limits in seconds; "ttft=200ms,itl=25ms,tpot=30ms,e2e=2s" (units ms, s, us; bare = ms).
struct Slo {
  std::optional<double> ttft_s, itl_s, tpot_s, e2e_s;
  bool empty() const { return !ttft_s && !itl_s && !tpot_s && !e2e_s; }
  std::string ToString() const;
};
Result<Slo> ParseSlo(const std::string& text);

// Per-request derived values (successful requests).
double MeanItl(const RequestRecord& r);   // -1 with fewer than 2 chunks
double Tpot(const RequestRecord& r);      // -1 with fewer than 2 tokens
bool MeetsSlo(const RequestRecord& r, const Slo& slo);

struct RunSummary {
  std::string label;
  int concurrency = 0;          // closed loop; 0 otherwise
  double request_rate = 0;      // open loop (Poisson); 0 otherwise
  double duration_s = 0;
  int num_requests = 0, num_ok = 0, num_errors = 0;
  std::map<std::string, int> errors;  // by ErrorKey()
  long total_input_tokens = 0, total_output_tokens = 0;  // usage of successful requests
  // Prefix cache hit rate: usage.prompt_tokens_details.cached_tokens summed over the successful
  // requests that report it, over their prompt_tokens (OpenAI's prompt-caching field; what vLLM
  // and tandem report as "Prefix cache hit rate"). -1 when no request reported it.
  long cached_input_tokens = 0, input_tokens_with_cache_info = 0;
  double prefix_cache_hit_rate = -1;
  double request_throughput = 0, output_throughput = 0, total_token_throughput = 0;  // per second
  double goodput = 0;           // requests/s meeting the SLOs (= request_throughput without SLOs)
  int num_slo_met = 0;
  int usage_missing = 0;        // successful requests without usage
  int chunk_usage_mismatch = 0; // content chunks != usage completion_tokens
  int output_len_mismatch = 0;  // usage completion_tokens != requested max_tokens
  Distribution ttft_ms, itl_ms, tpot_ms, e2e_ms;
  // Multi-turn sessions (--num-turns): TTFT of first turns (turn 0) and of returning turns (1 and
  // later, which resend the history: what a prefix cache or its host tier serves). Count 0 when
  // no request was a returning turn.
  Distribution ttft_first_turn_ms, ttft_returning_ms;
};

RunSummary Summarize(const RunResult& run, const Slo& slo);

}  // namespace tandem::bench
