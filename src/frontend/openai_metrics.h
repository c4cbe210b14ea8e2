// Frontend metrics of the OpenAI API (DESIGN.md section 4, Prometheus names, prefix tandem_):
//   tandem_requests_total{endpoint,status}       counter: /v1 requests by path and HTTP status
//                                                ("499" when the client went away first)
//   tandem_time_to_first_token_seconds           histogram: request arrival -> first token
//   tandem_inter_token_latency_seconds           histogram: time between tokens of one choice
//                                                (an output of k tokens counts k gaps of dt/k)
//   tandem_request_duration_seconds              histogram: arrival -> last byte (generation
//                                                requests)
//   tandem_prompt_tokens_total                   counter: prompt tokens, per engine request
//   tandem_generation_tokens_total               counter: generated tokens
//   tandem_prefix_cache_queries_total            counter: prompt tokens looked up (= prompt tokens)
//   tandem_prefix_cache_hits_total               counter: of which served from the prefix cache
//   tandem_generation_requests_total             counter: valid generation requests (the SLA
//                                                planner's arrival rate)
//   tandem_prompt_tokens_before_first_token      gauge: prompt tokens of valid requests that have
//                                                no first token yet (the prefill backlog the planner
//                                                clears)
// Gauges set from EngineClient::Stats() before each /metrics render (a registry collector):
//   tandem_kv_blocks_used, tandem_kv_blocks_total, tandem_num_requests_running,
//   tandem_num_requests_waiting, tandem_prefix_cache_hit_ratio (engine hits / queries, 0 when none).
#pragma once

#include <memory>
#include <string>

#include "common/metrics.h"
#include "engine/engine_client.h"

namespace tandem::openai {

class ServiceMetrics {
 public:
  // `registry` must outlive this object.
  explicit ServiceMetrics(metrics::Registry* registry);

  void CountRequest(const std::string& endpoint, int http_status);
  // Adds the engine-stats collector; it holds `engine` weakly (a no-op once it is gone).
  void AddEngineCollector(std::weak_ptr<EngineClient> engine);
  metrics::Registry& registry() { return *registry_; }

  metrics::Histogram& time_to_first_token;
  metrics::Histogram& inter_token_latency;
  metrics::Histogram& request_duration;
  metrics::Counter& prompt_tokens;
  metrics::Counter& generation_tokens;
  metrics::Counter& prefix_cache_queries;
  metrics::Counter& prefix_cache_hits;
  metrics::Counter& generation_requests;
  metrics::Gauge& prompt_tokens_before_first_token;

 private:
  metrics::Registry* registry_;
};

}  // namespace tandem::openai
