#include "frontend/openai_metrics.h"

#include "engine/kv_offload_metrics.h"

namespace tandem::openai {

ServiceMetrics::ServiceMetrics(metrics::Registry* r)
    : time_to_first_token(r->GetHistogram("tandem_time_to_first_token_seconds",
                                          "Time from request arrival to the first generated token.",
                                          metrics::LatencyBuckets())),
      inter_token_latency(r->GetHistogram("tandem_inter_token_latency_seconds",
                                          "Time between consecutive tokens of one choice.",
                                          metrics::LatencyBuckets())),
      request_duration(r->GetHistogram("tandem_request_duration_seconds",
                                       "Time from request arrival to the end of the response.",
                                       metrics::LatencyBuckets())),
      prompt_tokens(r->GetCounter("tandem_prompt_tokens_total", "Prompt tokens processed.")),
      generation_tokens(r->GetCounter("tandem_generation_tokens_total", "Tokens generated.")),
      prefix_cache_queries(r->GetCounter("tandem_prefix_cache_queries_total",
                                         "Prompt tokens looked up in the prefix cache.")),
      prefix_cache_hits(r->GetCounter("tandem_prefix_cache_hits_total",
                                      "Prompt tokens served from the prefix cache.")),
      generation_requests(r->GetCounter("tandem_generation_requests_total",
                                        "Valid generation requests.")),
      prompt_tokens_before_first_token(r->GetGauge(
          "tandem_prompt_tokens_before_first_token",
          "Prompt tokens of valid requests that have no first token yet.")),
      registry_(r) {}

void ServiceMetrics::CountRequest(const std::string& endpoint, int http_status) {
  registry_
      ->GetCounter("tandem_requests_total", "HTTP API requests by endpoint and status.",
                   {{"endpoint", endpoint}, {"status", std::to_string(http_status)}})
      .Inc();
}

void ServiceMetrics::AddEngineCollector(std::weak_ptr<EngineClient> engine) {
  metrics::Registry* r = registry_;
  auto& used = r->GetGauge("tandem_kv_blocks_used", "KV cache blocks held by live requests.");
  auto& total = r->GetGauge("tandem_kv_blocks_total", "KV cache blocks in the pool.");
  auto& running = r->GetGauge("tandem_num_requests_running", "Requests being generated.");
  auto& waiting = r->GetGauge("tandem_num_requests_waiting", "Requests waiting to be scheduled.");
  auto& ratio = r->GetGauge("tandem_prefix_cache_hit_ratio",
                            "Prompt tokens served from the prefix cache / prompt tokens looked up.");
  r->AddCollector([engine = std::move(engine), r, &used, &total, &running, &waiting, &ratio] {
    auto e = engine.lock();
    if (!e) return;
    EngineClientStats s = e->Stats();
    used.Set(s.engine.num_kv_blocks_used);
    total.Set(s.engine.num_kv_blocks_total);
    running.Set(s.engine.num_running);
    waiting.Set(s.engine.num_waiting);
    ratio.Set(s.engine.prefix_cache_queries == 0
                  ? 0.0
                  : static_cast<double>(s.engine.prefix_cache_hits) /
                        static_cast<double>(s.engine.prefix_cache_queries));
    if (s.engine.kv_offload_host_capacity_blocks > 0) ExportKvOffloadMetrics(s.engine, *r);
  });
}

}  // namespace tandem::openai
