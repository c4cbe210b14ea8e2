#include "engine/kv_offload_metrics.h"

namespace tandem {

void ExportKvOffloadMetrics(const EngineStats& s, metrics::Registry& r) {
  r.GetGauge("tandem_kv_offload_host_blocks", "KV blocks held in the host tier")
      .Set(static_cast<double>(s.kv_offload_host_blocks));
  r.GetGauge("tandem_kv_offload_host_capacity_blocks", "KV blocks the host tier can hold")
      .Set(static_cast<double>(s.kv_offload_host_capacity_blocks));
  auto raise = [&](const char* name, const char* help, double value) {
    r.GetCounter(name, help).RaiseTo(value);
  };
  raise("tandem_kv_offloaded_blocks_total", "KV blocks copied from the pool into the host tier",
        static_cast<double>(s.kv_offloaded_blocks));
  raise("tandem_kv_offloaded_bytes_total", "Bytes copied from the pool into the host tier",
        static_cast<double>(s.kv_offloaded_bytes));
  raise("tandem_kv_offload_seconds_total", "Seconds spent copying blocks into the host tier",
        s.kv_offload_seconds);
  raise("tandem_kv_onboarded_blocks_total", "KV blocks copied from the host tier into the pool",
        static_cast<double>(s.kv_onboarded_blocks));
  raise("tandem_kv_onboarded_bytes_total", "Bytes copied from the host tier into the pool",
        static_cast<double>(s.kv_onboarded_bytes));
  raise("tandem_kv_onboard_seconds_total", "Seconds spent copying blocks from the host tier",
        s.kv_onboard_seconds);
}

}  // namespace tandem
