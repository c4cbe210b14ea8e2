#include "transfer/transfer_stats.h"

#include <fmt/format.h>

namespace tandem::transfer {

TransferStats& TransferStats::operator+=(const TransferStats& o) {
  num_transfers += o.num_transfers;
  num_errors += o.num_errors;
  bytes += o.bytes;
  seconds += o.seconds;
  num_regions += o.num_regions;
  num_descriptors += o.num_descriptors;
  return *this;
}

TransferStats TransferStats::Since(const TransferStats& e) const {
  TransferStats d;
  d.num_transfers = num_transfers - e.num_transfers;
  d.num_errors = num_errors - e.num_errors;
  d.bytes = bytes - e.bytes;
  d.seconds = seconds - e.seconds;
  d.num_regions = num_regions - e.num_regions;
  d.num_descriptors = num_descriptors - e.num_descriptors;
  return d;
}

std::string FormatTransferMetricsLine(const TransferStats& s) {
  constexpr double kMB = 1024.0 * 1024.0;
  double n = static_cast<double>(s.num_transfers);
  double mb = static_cast<double>(s.bytes) / kMB;
  double avg_ms = s.num_transfers ? s.seconds * 1e3 / n : 0.0;
  double avg_mb = s.num_transfers ? mb / n : 0.0;
  double mbps = s.seconds > 0 ? mb / s.seconds : 0.0;
  return fmt::format(
      "KV Transfer metrics: Num successful transfers={}, Avg xfer time (ms)={:.3f}, Avg MB per transfer={:.3f}, "
      "Throughput (MB/s)={:.1f}",
      s.num_transfers, avg_ms, avg_mb, mbps);
}

void UpdateTransferMetrics(const TransferStats& s, metrics::Registry& registry, const metrics::Labels& labels) {
  auto set = [&](const char* name, const char* help, double value) {
    registry.GetCounter(name, help, labels).RaiseTo(value);
  };
  set("tandem_kv_transfers_total", "KV cache transfers completed successfully.",
      static_cast<double>(s.num_transfers));
  set("tandem_kv_transfer_bytes_total", "Bytes of KV cache moved by successful transfers.",
      static_cast<double>(s.bytes));
  set("tandem_kv_transfer_seconds_total", "Summed duration of successful KV cache transfers, in seconds.",
      s.seconds);
  set("tandem_kv_transfer_errors_total", "KV cache transfers that ended in an error.",
      static_cast<double>(s.num_errors));
}

}  // namespace tandem::transfer
