#include "worker/worker_metrics.h"

#include "common/logging.h"
#include "engine/kv_offload_metrics.h"
#include "transfer/transfer_stats.h"

namespace tandem::worker {

void AddWorkerCollector(metrics::Registry& registry, std::weak_ptr<AsyncEngine> weak_engine,
                        std::weak_ptr<DecodeDisagg> weak_disagg) {
  registry.AddCollector([&registry, weak_engine, weak_disagg] {
    auto engine = weak_engine.lock();
    if (!engine) return;
    const EngineStats s = engine->Stats().engine;
    registry.GetGauge("tandem_kv_blocks_used", "KV blocks referenced by live requests")
        .Set(s.num_kv_blocks_used);
    registry.GetGauge("tandem_kv_blocks_total", "KV pool size in blocks").Set(s.num_kv_blocks_total);
    registry.GetGauge("tandem_num_requests_running", "Requests running in the engine").Set(s.num_running);
    registry.GetGauge("tandem_num_requests_waiting", "Requests waiting for a running slot")
        .Set(s.num_waiting);
    auto set_counter = [&](const char* name, const char* help, double value) {
      registry.GetCounter(name, help).RaiseTo(value);
    };
    set_counter("tandem_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache",
                static_cast<double>(s.prefix_cache_queries));
    set_counter("tandem_prefix_cache_hits_total", "Prompt tokens served from the prefix cache",
                static_cast<double>(s.prefix_cache_hits));
    if (s.kv_offload_host_capacity_blocks > 0) ExportKvOffloadMetrics(s, registry);
    auto disagg = weak_disagg.lock();
    if (!disagg) return;
    transfer::UpdateTransferMetrics(disagg->transfer_stats(), registry);
    const double external = static_cast<double>(disagg->external_hit_tokens());
    set_counter("tandem_external_prefix_cache_hits_total",
                "Prompt tokens whose KV was written by a prefill worker", external);
    registry.GetGauge("tandem_external_prefix_cache_hit_ratio",
                      "Prompt tokens whose KV came from a prefill worker / prompt tokens looked up")
        .Set(s.prefix_cache_queries ? external / static_cast<double>(s.prefix_cache_queries) : 0.0);
    set_counter("tandem_remote_prefill_fallbacks_total",
                "Remote prefills that failed and were prefilled locally",
                static_cast<double>(disagg->num_fallbacks()));
  });
}

StatsLogger::StatsLogger(std::weak_ptr<AsyncEngine> engine, std::weak_ptr<DecodeDisagg> disagg,
                         std::chrono::milliseconds interval)
    : engine_(std::move(engine)), disagg_(std::move(disagg)), interval_(interval) {
  thread_ = std::thread([this] { Loop(); });
}

StatsLogger::~StatsLogger() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StatsLogger::Loop() {
  uint64_t last_transfers = 0, last_errors = 0, last_queries = 0, last_offload = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, interval_, [&] { return stopping_; })) {
    auto engine = engine_.lock();
    if (!engine) continue;
    const EngineStats es = engine->Stats().engine;
    if (es.kv_offload_host_capacity_blocks > 0 &&
        es.kv_offloaded_blocks + es.kv_onboarded_blocks != last_offload) {
      last_offload = es.kv_offloaded_blocks + es.kv_onboarded_blocks;
      log::info("{}", FormatKvOffloadLine(es));
    }
    auto disagg = disagg_.lock();
    if (!disagg) continue;
    const transfer::TransferStats t = disagg->transfer_stats();
    const uint64_t queries = engine->Stats().engine.prefix_cache_queries;
    if (t.num_transfers == last_transfers && t.num_errors == last_errors && queries == last_queries) {
      continue;
    }
    last_transfers = t.num_transfers;
    last_errors = t.num_errors;
    last_queries = queries;
    log::info("{}", transfer::FormatTransferMetricsLine(t));
    log::info("{}", FormatExternalHitRateLine(disagg->external_hit_tokens(), queries));
  }
}

std::string FormatKvOffloadLine(const EngineStats& s) {
  auto rate = [](uint64_t bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0.0; };
  return fmt::format(
      "kv offload: host tier {}/{} blocks; offloaded {} blocks ({:.1f} MB, {:.3f} s, {:.2f} GB/s), "
      "onboarded {} blocks ({:.1f} MB, {:.3f} s, {:.2f} GB/s); prefix cache hits {} of {} prompt tokens",
      s.kv_offload_host_blocks, s.kv_offload_host_capacity_blocks, s.kv_offloaded_blocks,
      s.kv_offloaded_bytes / 1e6, s.kv_offload_seconds, rate(s.kv_offloaded_bytes, s.kv_offload_seconds),
      s.kv_onboarded_blocks, s.kv_onboarded_bytes / 1e6, s.kv_onboard_seconds,
      rate(s.kv_onboarded_bytes, s.kv_onboard_seconds), s.prefix_cache_hits, s.prefix_cache_queries) +
         (s.kv_offload_disk_capacity_blocks == 0
              ? std::string()
              : fmt::format("; disk tier {}/{} blocks, wrote {} ({:.1f} MB, {:.2f} GB/s), read {} "
                            "({:.1f} MB, {:.2f} GB/s), {} fetched, {} corrupt, {} write errors",
                            s.kv_offload_disk_blocks, s.kv_offload_disk_capacity_blocks,
                            s.kv_offload_disk_written_blocks, s.kv_offload_disk_written_bytes / 1e6,
                            rate(s.kv_offload_disk_written_bytes, s.kv_offload_disk_write_seconds),
                            s.kv_offload_disk_read_blocks, s.kv_offload_disk_read_bytes / 1e6,
                            rate(s.kv_offload_disk_read_bytes, s.kv_offload_disk_read_seconds),
                            s.kv_offload_fetched_blocks, s.kv_offload_disk_corrupt,
                            s.kv_offload_disk_write_errors));
}

}  // namespace tandem::worker
