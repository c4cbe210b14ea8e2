// Transfer accounting: totals of an agent's transfers, the decode worker's log line and the
// /metrics counters (DESIGN.md section 4).
#pragma once

#include <cstdint>
#include <string>

#include "common/metrics.h"

namespace tandem::transfer {

struct TransferStats {
  uint64_t num_transfers = 0;  // successful transfers
  uint64_t num_errors = 0;     // transfers that ended in an error
  uint64_t bytes = 0;          // bytes of the successful transfers
  double seconds = 0.0;        // summed duration (post to completion) of the successful transfers
  uint64_t num_regions = 0;    // coalesced regions of the successful transfers
  uint64_t num_descriptors = 0;  // descriptors before coalescing

  TransferStats& operator+=(const TransferStats& o);
  // this - earlier (for "since the last log line").
  TransferStats Since(const TransferStats& earlier) const;
};

// "KV Transfer metrics: Num successful transfers=N, Avg xfer time (ms)=T, Avg MB per transfer=M,
// Throughput (MB/s)=R". MB = 2^20 bytes (as vLLM's NIXL connector); T and M with 3 decimals, R
// with 1; throughput = bytes / summed transfer time. With no transfers every average is 0.
std::string FormatTransferMetricsLine(const TransferStats& stats);

// Registers (first call) and sets the counters tandem_kv_transfers_total,
// tandem_kv_transfer_bytes_total, tandem_kv_transfer_seconds_total and
// tandem_kv_transfer_errors_total (with `labels`) to the totals in `stats`. Counters only go up: a
// total below the current value leaves it unchanged. Call it from a Registry collector or after
// transfers, always with cumulative stats of the same source.
void UpdateTransferMetrics(const TransferStats& stats, metrics::Registry& registry,
                           const metrics::Labels& labels = {});

}  // namespace tandem::transfer
