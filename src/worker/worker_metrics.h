// A worker process's own metrics (served on its --metrics-port at /metrics) and its periodic log
// lines (DESIGN.md section 4).
//
// Metrics (Prometheus, prefix tandem_), collected at scrape time:
//   tandem_kv_blocks_used, tandem_kv_blocks_total, tandem_num_requests_running,
//   tandem_num_requests_waiting                      gauges: this worker's engine
//   tandem_prefix_cache_queries_total, tandem_prefix_cache_hits_total   counters: local prefix cache
//   decode workers also:
//   tandem_kv_transfers_total, tandem_kv_transfer_bytes_total, tandem_kv_transfer_seconds_total,
//   tandem_kv_transfer_errors_total                  counters: KV written into this worker by
//                                                    prefill workers (transfer_stats.h)
//   tandem_external_prefix_cache_hits_total          counter: prompt tokens whose KV came from a
//                                                    prefill worker
//   tandem_external_prefix_cache_hit_ratio           gauge: the above / prefix cache queries
//   tandem_remote_prefill_fallbacks_total            counter: remote prefills that failed and were
//                                                    prefilled locally
//   with a host tier (--kv-offload-host-gib): the kv_offload_metrics.h series
// Log lines (decode workers), at most every `interval` and only when something changed:
//   "KV Transfer metrics: Num successful transfers=N, Avg xfer time (ms)=T, Avg MB per transfer=M,
//    Throughput (MB/s)=R" (cumulative) and "External prefix cache hit rate: P%";
//   any worker with a host tier: FormatKvOffloadLine (cumulative).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/metrics.h"
#include "engine/async_engine.h"
#include "worker/decode_disagg.h"

namespace tandem::worker {

// "kv offload: host tier H/C blocks; offloaded N blocks (MB, s, GB/s), onboarded M blocks (...);
// prefix cache hits X of Y prompt tokens".
std::string FormatKvOffloadLine(const EngineStats& s);

// `engine` and `disagg` (null unless decode) must outlive the registry's use of the collector.
void AddWorkerCollector(metrics::Registry& registry, std::weak_ptr<AsyncEngine> engine,
                        std::weak_ptr<DecodeDisagg> disagg);

class StatsLogger {
 public:
  StatsLogger(std::weak_ptr<AsyncEngine> engine, std::weak_ptr<DecodeDisagg> disagg,
              std::chrono::milliseconds interval);
  ~StatsLogger();

 private:
  void Loop();
  std::weak_ptr<AsyncEngine> engine_;
  std::weak_ptr<DecodeDisagg> disagg_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::worker
