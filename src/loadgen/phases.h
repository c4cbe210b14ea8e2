// Phased load (`tandem bench --phases`): one open-loop run made of phases in a row, each with its own
// prompt and output lengths, Poisson arrival rate and duration (e.g. long prompts and short outputs,
// then short prompts and long outputs, then a lull), and the per-phase summary of such a run.
//
//   spec   "NAME:input=LEN,output=LEN,rate=R,duration=S;NAME:..."   (phases separated by ';')
//          LEN as --input-len (N, uniform:A:B, normal:MU:SIGMA); rate in requests/s (> 0);
//          duration in seconds (> 0); NAME [A-Za-z0-9._-]+. Every key is required once.
//
// Phase i covers [start_s, start_s + duration_s) of the run's clock, start_s the sum of the
// durations before it; its requests arrive as a Poisson process of its rate within that window
// (none past its end) and carry the phase's index (WorkItem::phase, RequestRecord::phase). A
// request belongs to the phase in which it was sent, however long it runs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "loadgen/runner.h"
#include "loadgen/stats.h"
#include "loadgen/workload.h"

namespace tandem::bench {

struct PhaseSpec {
  std::string name;
  LengthDist input_len, output_len;  // tokens
  double rate = 1;                   // requests per second
  double duration_s = 60;
  double start_s = 0;                // from the run's start (set by ParsePhases)
};

// InvalidArgument naming the phase and key for anything malformed (unknown or missing key, bad
// length, rate or duration <= 0, bad or duplicate name, no phase).
Result<std::vector<PhaseSpec>> ParsePhases(const std::string& spec);
std::string PhasesToString(const std::vector<PhaseSpec>& phases);

// The run's items, with timestamps in seconds from the run's start (timestamps_from_zero) and
// their phase; finite (the last phase's end). Prompts as the synthetic workload (`vocab`), seeded.
std::unique_ptr<Workload> MakePhasedWorkload(const std::vector<PhaseSpec>& phases,
                                             std::shared_ptr<const PromptVocab> vocab, uint64_t seed);

// A labelled sample series from a scraped Prometheus endpoint (runner.h ScrapeSample): the value of
// `key` ("name{label=value}") at each scrape time that had it.
struct Step {
  double t_s = 0;
  double value = 0;
};
std::vector<Step> SeriesOf(const std::vector<ScrapeSample>& samples, const std::string& key);

// A change of a scraped series: at t_s the value went from `from` to `to`.
struct ScaleEvent {
  double t_s = 0;
  std::string key;
  double from = 0, to = 0;
};
// The changes of each key in `keys`, in time order.
std::vector<ScaleEvent> ScaleEvents(const std::vector<ScrapeSample>& samples,
                                    const std::vector<std::string>& keys);

struct PhaseSummary {
  PhaseSpec spec;
  RunSummary run;            // Summarize() of the phase's requests over its duration
  double slo_met_pct = 0;    // requests that met the SLO / requests sent in the phase, in %
  // Per scraped key: the smallest and largest value seen while the phase ran (absent when never).
  std::map<std::string, std::pair<double, double>> range;
  std::vector<ScaleEvent> events;  // the scale events within the phase's window
};

// A short name of a scraped key: "tandem_planner_desired_replicas{role=decode}" -> "desired decode".
std::string SeriesLabel(const std::string& key);

// One summary per phase. `keys` names the scraped series to report (ranges and events).
std::vector<PhaseSummary> SummarizePhases(const RunResult& run, const std::vector<PhaseSpec>& phases,
                                          const Slo& slo, const std::vector<std::string>& keys);

// The markdown table: per phase, requests ok / failed, SLO met %, goodput, p50 / p99 TTFT and ITL,
// the series' ranges, then the scale events with their times.
std::string FormatPhaseTable(const std::vector<PhaseSummary>& phases,
                             const std::vector<std::string>& keys);

// [{"name", "start_s", "duration_s", "rate", "input_len", "output_len", "slo_met_pct",
//   "summary": SummaryToJson, "range": {key: [min, max]}, "events": [{"t_s", "key", "from", "to"}]}]
nlohmann::json PhaseSummariesToJson(const std::vector<PhaseSummary>& phases);
// [{"t_s", "values": {key: value}}]
nlohmann::json ScrapesToJson(const std::vector<ScrapeSample>& samples);

}  // namespace tandem::bench
