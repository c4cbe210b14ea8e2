// The load generator: sends a workload's conversations to the server and records every request.
//
//   kConcurrency  closed loop: `concurrency` clients, each with one keep-alive connection, send a
//                 conversation's turns one after another and take the next conversation at once;
//                 with `sessions_per_client` N > 1 a client keeps N conversations open and sends
//                 one turn of each in turn (round-robin: users who think between turns, as in
//                 LMCache's multi-round QA benchmark), so a conversation's history waits in the
//                 server's cache while the client's other N - 1 turns run.
//   kRate         open loop: conversations arrive as a Poisson process of `request_rate` per second
//                 (exponential gaps from a seeded generator), each on a free connection (a new one
//                 when all are busy), however many are already in flight.
//   kTrace        open loop on the workload's timestamps (Mooncake), times `time_scale`.
//
// Bounds: `num_requests` requests (turns) at most and/or `duration_s` seconds in which new requests
// start; requests in flight are waited for (each within the client's timeout). `warmup` requests go
// first (closed loop, same concurrency; 1 client in the open-loop modes) and are not recorded.
// Everything runs on one thread (Asio coroutines); the run's clock starts after the warm-up.
//
// Scrape (optional, `scrape_url`): while the measured part runs, a Prometheus text endpoint (e.g.
// the SLA planner's /metrics) is read every `scrape_interval_s` seconds, from the run's start until
// its last request ends; the samples whose names start with `scrape_prefix` are kept as
// ScrapeSamples (e.g. tandem_planner_current_replicas per role: the replica timeline). A failed
// scrape is skipped (counted in RunResult::scrape_errors).
#pragma once

#include <cstdint>
#include <map>
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
  int sessions_per_client = 1;  // kConcurrency: conversations each client interleaves (>= 1)
  double request_rate = 1.0;   // requests (conversations) per second
  double time_scale = 1.0;     // kTrace
  int num_requests = 0;        // 0: no bound
  double duration_s = 0;       // 0: no bound
  int warmup = 0;
  uint64_t seed = 0;
  bool progress = false;       // a carriage-return progress line on stderr
  double min_duration_s = 0;   // open loop: no new request after it, but the run lasts this long
  std::string scrape_url;      // "http://host:port/metrics"; empty: no scraping
  double scrape_interval_s = 1;
  std::string scrape_prefix = "tandem_planner_";
};

// One reading of the scraped endpoint: t_s seconds from the run's start; values keyed
// "name{label=value,...}" (labels in name order, no quotes; "name" alone without labels).
struct ScrapeSample {
  double t_s = 0;
  std::map<std::string, double> values;
};

struct RunResult {
  RunConfig config;
  std::string label;                    // "c=4", "rate=2", "trace"
  double duration_s = 0;                // first send to last completion
  std::vector<RequestRecord> records;   // in completion order
  double start_unix_s = 0;              // wall clock (Unix seconds) at the run's start
  std::vector<ScrapeSample> scrapes;    // in time order
  int scrape_errors = 0;
};

// Parses Prometheus text into a ScrapeSample's values (those whose names start with `prefix`).
// InvalidArgument for text that is not the exposition format.
Result<std::map<std::string, double>> ScrapeValues(const std::string& text, const std::string& prefix);

// InvalidArgument when nothing bounds the run (a synthetic workload without --num-requests or
// --duration). Request failures are records, not errors.
Result<RunResult> RunBenchmark(const ClientOptions& client, Workload& workload,
                               const RunConfig& config);

// Arrival times (seconds from 0) of `n` events of a Poisson process of `rate` per second.
std::vector<double> PoissonArrivals(double rate, int n, uint64_t seed);

}  // namespace tandem::bench
