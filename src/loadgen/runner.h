// The load generator: sends a workload's conversations to the server and records every request.
//
//   kConcurrency  closed loop: `concurrency` clients, each with one keep-alive connection, send a
//                 conversation's turns one after another and take the next conversation at once.
//   kRate         open loop: conversations arrive as a Poisson process of `request_rate` per second
//                 (exponential gaps from a seeded generator), each on a free connection (a new one
//                 when all are busy), however many are already in flight.
//   kTrace        open loop on the workload's timestamps (Mooncake), times `time_scale`.
//
// Bounds: `num_requests` requests (turns) at most and/or `duration_s` seconds in which new requests
// start; requests in flight are waited for (each within the client's timeout). `warmup` requests go
// first (closed loop, same concurrency; 1 client in the open-loop modes) and are not recorded.
// Everything runs on one thread (Asio coroutines); the run's clock starts after the warm-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "loadgen/openai_client.h"
#include "loadgen/record.h"
#include "loadgen/workload.h"

namespace tandem::bench {

struct RunConfig {
  enum class Mode { kConcurrency, kRate, kTrace };
  Mode mode = Mode::kConcurrency;
  int concurrency = 1;
  double request_rate = 1.0;   // requests (conversations) per second
  double time_scale = 1.0;     // kTrace
  int num_requests = 0;        // 0: no bound
  double duration_s = 0;       // 0: no bound
  int warmup = 0;
  uint64_t seed = 0;
  bool progress = false;       // a carriage-return progress line on stderr
};

struct RunResult {
  RunConfig config;
  std::string label;                    // "c=4", "rate=2", "trace"
  double duration_s = 0;                // first send to last completion
  std::vector<RequestRecord> records;   // in completion order
};

// InvalidArgument when nothing bounds the run (a synthetic workload without --num-requests or
// --duration). Request failures are records, not errors.
Result<RunResult> RunBenchmark(const ClientOptions& client, Workload& workload,
                               const RunConfig& config);

// Arrival times (seconds from 0) of `n` events of a Poisson process of `rate` per second.
std::vector<double> PoissonArrivals(double rate, int n, uint64_t seed);

}  // namespace tandem::bench
