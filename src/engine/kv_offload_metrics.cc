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
  if (s.kv_offload_disk_capacity_blocks == 0) return;
  r.GetGauge("tandem_kv_offload_disk_blocks", "KV blocks held in the disk tier")
      .Set(static_cast<double>(s.kv_offload_disk_blocks));
  r.GetGauge("tandem_kv_offload_disk_capacity_blocks", "KV blocks the disk tier can hold")
      .Set(static_cast<double>(s.kv_offload_disk_capacity_blocks));
  raise("tandem_kv_offload_disk_written_blocks_total", "KV blocks written from the host tier to disk",
        static_cast<double>(s.kv_offload_disk_written_blocks));
  raise("tandem_kv_offload_disk_written_bytes_total", "Bytes written to the disk tier",
        static_cast<double>(s.kv_offload_disk_written_bytes));
  raise("tandem_kv_offload_disk_write_seconds_total", "Seconds the disk tier spent writing",
        s.kv_offload_disk_write_seconds);
  raise("tandem_kv_offload_disk_read_blocks_total", "KV blocks read from the disk tier into the host tier",
        static_cast<double>(s.kv_offload_disk_read_blocks));
  raise("tandem_kv_offload_disk_read_bytes_total", "Bytes read from the disk tier",
        static_cast<double>(s.kv_offload_disk_read_bytes));
  raise("tandem_kv_offload_disk_read_seconds_total", "Seconds the disk tier spent reading",
        s.kv_offload_disk_read_seconds);
  raise("tandem_kv_offload_disk_write_errors_total",
        "Disk-tier writes that failed (a full disk, an I/O error); the block stayed off the disk",
        static_cast<double>(s.kv_offload_disk_write_errors));
  raise("tandem_kv_offload_disk_corrupt_total",
        "Disk-tier blocks that failed their checksum or read: dropped and recomputed",
        static_cast<double>(s.kv_offload_disk_corrupt));
  raise("tandem_kv_offload_fetched_blocks_total",
        "KV blocks fetched from the disk tier into the host tier for a waiting request",
        static_cast<double>(s.kv_offload_fetched_blocks));
}

}  // namespace tandem
