// The host tier's numbers (EngineStats::kv_offload_*; issue 26) on a metrics registry, for the
// worker's and the frontend's /metrics: tandem_kv_offload_host_blocks and _capacity_blocks
// (gauges), tandem_kv_offloaded_blocks_total / _bytes_total / _seconds_total and the same for
// onboarded (counters, raised to the engine's running totals).
#pragma once

#include "common/metrics.h"
#include "engine/engine.h"

namespace tandem {

void ExportKvOffloadMetrics(const EngineStats& s, metrics::Registry& registry);

}  // namespace tandem
