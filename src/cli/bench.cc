// tandem bench: the load generator and report (src/loadgen/), and `tandem bench compare A.json B.json`.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/file_util.h"
#include "loadgen/compare.h"
#include "loadgen/openai_client.h"
#include "loadgen/phases.h"
#include "loadgen/report.h"
#include "loadgen/runner.h"
#include "loadgen/stats.h"
#include "loadgen/timeline.h"
#include "loadgen/workload.h"
#include "tokenizer/tokenizer.h"

namespace tandem::cli {
namespace {

using bench::RunConfig;

struct BenchOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string endpoint = "chat";
  std::string model, api_key, tokenizer_dir;
  std::string concurrency, request_rate;
  int sessions_per_client = 1;
  int num_requests = 0;
  double duration_s = 0;
  int warmup = 0;
  double timeout_s = 600;
  uint64_t seed = 0;
  std::string dataset = "synthetic", dataset_path;
  std::string input_len = "128", output_len = "128";
  bool output_len_given = false;
  int num_prefixes = 0, prefix_len = 0, num_turns = 1, block_size = 512, max_model_len = 0;
  double time_scale = 1.0;
  std::string slo;
  std::string output_json, output_csv, output_svg;
  bool no_progress = false, no_ignore_eos = false;
  std::string compare_a, compare_b;
  std::string phases;                 // loadgen/phases.h
  std::string scrape_url, scrape_keys = "tandem_planner_desired_replicas{role=prefill}|"
                                        "tandem_planner_desired_replicas{role=decode}";
  double scrape_interval_s = 1;
};

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "tandem bench: %s\n", message.c_str());
  return code;
}

template <typename T>
bool ParseList(const std::string& text, std::vector<T>* out) {
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const double v = std::stod(item, &used);
      if (used != item.size() || !(v > 0)) return false;
      out->push_back(static_cast<T>(v));
    } catch (...) {
      return false;
    }
  }
  return !out->empty();
}

int RunCompare(const BenchOptions& o) {
  auto a = ReadJsonFile(o.compare_a);
  if (!a.ok()) return Fail(a.status().ToString());
  auto b = ReadJsonFile(o.compare_b);
  if (!b.ok()) return Fail(b.status().ToString());
  auto text = bench::CompareReports(*a, *b, o.compare_a, o.compare_b);
  if (!text.ok()) return Fail(text.status().ToString());
  std::fputs(text->c_str(), stdout);
  return 0;
}

int RunBench(const BenchOptions& o) {
  bench::ClientOptions client;
  auto endpoint = bench::ParseUrl(o.url);
  if (!endpoint.ok()) return Fail(endpoint.status().message(), 2);
  client.endpoint = *endpoint;
  client.chat = o.endpoint == "chat";
  client.model = o.model;
  client.api_key = o.api_key;
  if (client.api_key.empty())
    if (const char* env = std::getenv("TANDEM_API_KEY")) client.api_key = env;
  client.timeout_s = o.timeout_s;
  client.ignore_eos = !o.no_ignore_eos;

  bench::Slo slo;
  if (!o.slo.empty()) {
    auto parsed = bench::ParseSlo(o.slo);
    if (!parsed.ok()) return Fail(parsed.status().message(), 2);
    slo = *parsed;
  }
  bench::WorkloadOptions w;
  w.kind = o.dataset;
  w.path = o.dataset_path;
  auto in = bench::ParseLengthDist(o.input_len);
  auto out = bench::ParseLengthDist(o.output_len);
  if (!in.ok()) return Fail(in.status().message(), 2);
  if (!out.ok()) return Fail(out.status().message(), 2);
  w.input_len = *in;
  w.output_len = *out;
  w.output_len_given = o.output_len_given;
  w.num_prefixes = o.num_prefixes;
  w.prefix_len = o.prefix_len;
  w.num_turns = o.num_turns;
  w.block_size = o.block_size;
  w.max_model_len = o.max_model_len;
  w.seed = o.seed;

  // The sweep: one run per concurrency or per rate (or one trace replay).
  std::vector<RunConfig> configs;
  RunConfig base;
  base.num_requests = o.num_requests;
  base.duration_s = o.duration_s;
  base.warmup = o.warmup;
  base.seed = o.seed;
  base.time_scale = o.time_scale;
  base.progress = !o.no_progress && isatty(STDERR_FILENO) && std::getenv("CI") == nullptr;
  base.scrape_url = o.scrape_url;
  base.scrape_interval_s = o.scrape_interval_s;
  if (!o.concurrency.empty() && !o.request_rate.empty())
    return Fail("give --concurrency or --request-rate, not both", 2);
  if (o.sessions_per_client > 1 && (!o.request_rate.empty() || !o.phases.empty() ||
                                   (o.concurrency.empty() && o.dataset == "mooncake")))
    return Fail("--sessions-per-client is for the closed loop (--concurrency)", 2);
  std::vector<bench::PhaseSpec> phases;
  if (!o.phases.empty()) {
    auto parsed = bench::ParsePhases(o.phases);
    if (!parsed.ok()) return Fail(parsed.status().message(), 2);
    phases = std::move(*parsed);
    if (!o.concurrency.empty() || !o.request_rate.empty() || o.dataset != "synthetic" || o.warmup > 0 ||
        o.num_requests > 0 || o.duration_s > 0 || o.num_turns > 1 || o.num_prefixes > 0)
      return Fail("--phases sets lengths, rates and durations itself: no --concurrency, --request-rate, "
                  "--num-requests, --duration, --warmup, --num-turns, --num-prefixes or dataset", 2);
    RunConfig c = base;
    c.mode = RunConfig::Mode::kTrace;
    c.min_duration_s = phases.back().start_s + phases.back().duration_s;
    configs.push_back(c);
  } else if (!o.request_rate.empty()) {
    std::vector<double> rates;
    if (!ParseList(o.request_rate, &rates)) return Fail("--request-rate: expected R[,R...] > 0", 2);
    for (double r : rates) {
      RunConfig c = base;
      c.mode = RunConfig::Mode::kRate;
      c.request_rate = r;
      configs.push_back(c);
    }
  } else if (o.concurrency.empty() && o.dataset == "mooncake") {
    RunConfig c = base;
    c.mode = RunConfig::Mode::kTrace;
    configs.push_back(c);
  } else {
    std::vector<int> levels;
    if (!ParseList(o.concurrency.empty() ? std::string("1") : o.concurrency, &levels))
      return Fail("--concurrency: expected N[,N...] >= 1", 2);
    for (int n : levels) {
      RunConfig c = base;
      c.concurrency = n;
      c.sessions_per_client = o.sessions_per_client;
      configs.push_back(c);
    }
  }

  const std::string tokenizer_dir = o.tokenizer_dir.empty() ? DefaultModelDir() : o.tokenizer_dir;
  auto tokenizer = Tokenizer::Load(tokenizer_dir);
  if (!tokenizer.ok()) return Fail("tokenizer: " + tokenizer.status().ToString());
  auto vocab = bench::PromptVocab::FromTokenizer(**tokenizer);
  if (!vocab.ok()) return Fail(vocab.status().ToString());

  if (client.model.empty()) {
    boost::asio::io_context io;
    bench::HttpConnection conn(io.get_executor(), client.endpoint);
    Result<std::string> model = Status(StatusCode::kInternal, "no answer");
    boost::asio::co_spawn(
        io,
        [&]() -> boost::asio::awaitable<void> {
          model = co_await bench::FetchFirstModel(conn, client);
        },
        boost::asio::detached);
    io.run();
    if (!model.ok()) return Fail(model.status().message() + " (give --model)");
    client.model = *model;
  }

  std::vector<bench::RunResult> runs;
  std::vector<bench::RunSummary> summaries;
  for (const RunConfig& config : configs) {
    auto workload = phases.empty() ? bench::MakeWorkload(w, *tokenizer, *vocab)
                                   : Result<std::unique_ptr<bench::Workload>>(
                                         bench::MakePhasedWorkload(phases, *vocab, o.seed));
    if (!workload.ok()) return Fail(workload.status().ToString(), 2);
    auto run = bench::RunBenchmark(client, **workload, config);
    if (!run.ok()) return Fail(run.status().ToString(), 2);
    summaries.push_back(bench::Summarize(*run, slo));
    if (!phases.empty()) summaries.back().label = "phases";
    runs.push_back(std::move(*run));
  }
  std::fputs(bench::FormatTable(summaries).c_str(), stdout);
  std::vector<std::string> keys;
  std::vector<bench::PhaseSummary> phase_summaries;
  if (!phases.empty()) {
    std::stringstream ss(o.scrape_keys);
    for (std::string k; std::getline(ss, k, '|');)
      if (!k.empty()) keys.push_back(k);
    phase_summaries = bench::SummarizePhases(runs[0], phases, slo, keys);
    std::fputs(("\n" + bench::FormatPhaseTable(phase_summaries, keys)).c_str(), stdout);
    if (!o.scrape_url.empty())
      std::printf("scrapes: %zu read, %d failed\n", runs[0].scrapes.size(), runs[0].scrape_errors);
  }
  int rc = 0;
  for (const bench::RunSummary& s : summaries)
    if (s.num_requests > 0 && s.num_ok == 0) rc = Fail("every request of " + s.label + " failed");

  nlohmann::json config{{"url", o.url},
                        {"endpoint", o.endpoint},
                        {"model", client.model},
                        {"dataset", o.dataset},
                        {"dataset_path", o.dataset_path},
                        {"input_len", w.input_len.ToString()},
                        {"output_len", w.output_len.ToString()},
                        {"num_prefixes", o.num_prefixes},
                        {"prefix_len", o.prefix_len},
                        {"num_turns", o.num_turns},
                        {"block_size", o.block_size},
                        {"num_requests", o.num_requests},
                        {"duration_s", o.duration_s},
                        {"warmup", o.warmup},
                        {"timeout_s", o.timeout_s},
                        {"seed", o.seed},
                        {"ignore_eos", client.ignore_eos},
                        {"slo", slo.ToString()},
                        {"phases", bench::PhasesToString(phases)},
                        {"scrape_url", o.scrape_url}};
  if (!o.output_json.empty()) {
    auto j = bench::ReportToJson(config, runs, summaries);
    if (!phases.empty()) {
      j["phases"] = bench::PhaseSummariesToJson(phase_summaries);
      j["start_unix_s"] = runs[0].start_unix_s;
      j["scrapes"] = bench::ScrapesToJson(runs[0].scrapes);
    }
    if (Status st = bench::WriteTextFile(o.output_json, j.dump(2) + "\n"); !st.ok())
      rc = Fail(st.ToString());
  }
  if (!o.output_csv.empty()) {
    if (Status st = bench::WriteTextFile(o.output_csv, bench::FormatCsv(summaries)); !st.ok())
      rc = Fail(st.ToString());
  }
  if (!o.output_svg.empty()) {
    auto files = bench::WriteSvgCharts(o.output_svg, runs, summaries);
    if (!files.ok()) rc = Fail(files.status().ToString());
    if (!phases.empty()) {
      auto more = bench::WriteTimelineCharts(o.output_svg, runs[0], phases, slo, keys);
      if (!more.ok()) rc = Fail(more.status().ToString());
    }
  }
  return rc;
}

}  // namespace

Runner RegisterBench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  app.add_option("--url", o->url, "Server base URL (http://host:port)");
  app.add_option("--endpoint", o->endpoint, "chat: /v1/chat/completions, completions: /v1/completions")
      ->check(CLI::IsMember({"chat", "completions"}));
  app.add_option("--model", o->model, "Model name in requests (default: the first of /v1/models)");
  app.add_option("--api-key", o->api_key, "Bearer token (env TANDEM_API_KEY)");
  app.add_option("--tokenizer", o->tokenizer_dir,
                 "Model directory whose tokenizer.json builds prompts (default: the bundled model)");
  app.add_option("--concurrency", o->concurrency, "Closed loop: clients in flight; a list sweeps (1,4,16)");
  app.add_option("--sessions-per-client", o->sessions_per_client,
                 "Closed loop: conversations each client keeps open, one turn of each in turn (round-robin)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--request-rate", o->request_rate, "Open loop: Poisson arrivals per second; a list sweeps");
  app.add_option("--num-requests", o->num_requests, "Requests per run (0: bounded by --duration)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--duration", o->duration_s, "Seconds in which requests start, per run (0: no bound)")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--warmup", o->warmup, "Requests sent first and not measured")->check(CLI::Range(0, 1 << 30));
  app.add_option("--timeout", o->timeout_s, "Seconds one request may take")->check(CLI::Range(0.001, 1e9));
  app.add_option("--seed", o->seed, "Seed of prompts, lengths and arrivals");
  app.add_option("--dataset", o->dataset, "synthetic | sharegpt | mooncake")
      ->check(CLI::IsMember({"synthetic", "sharegpt", "mooncake"}));
  app.add_option("--dataset-path", o->dataset_path, "ShareGPT JSON or Mooncake trace JSONL");
  app.add_option("--input-len", o->input_len, "Prompt tokens (after a shared prefix): N, uniform:A:B, normal:MU:SIGMA");
  app.add_option_function<std::string>(
      "--output-len",
      [o](const std::string& v) {
        o->output_len = v;
        o->output_len_given = true;
      },
      "Output tokens (max_tokens, with ignore_eos): N, uniform:A:B, normal:MU:SIGMA (default 128)");
  app.add_option("--num-prefixes", o->num_prefixes, "Distinct shared prefixes (system prompts)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--prefix-len", o->prefix_len, "Tokens of each shared prefix")->check(CLI::Range(0, 1 << 30));
  app.add_option("--num-turns", o->num_turns, "Turns per session; each resends the history")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--block-size", o->block_size, "Mooncake: tokens per hash id")->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-model-len", o->max_model_len, "ShareGPT: skip longer conversations (0: no limit)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--time-scale", o->time_scale, "Mooncake replay: timestamps multiplied by this")
      ->check(CLI::Range(1e-9, 1e9));
  app.add_option("--slo", o->slo, "Goodput SLOs, e.g. ttft=200ms,itl=25ms (ttft, itl, tpot, e2e)");
  app.add_option("--output-json", o->output_json, "Report with every request");
  app.add_option("--output-csv", o->output_csv, "One row per run");
  app.add_option("--output-svg", o->output_svg, "Folder for SVG charts");
  app.add_option("--phases", o->phases,
                 "Phased open-loop load, one run: NAME:input=LEN,output=LEN,rate=R,duration=S;NAME:... "
                 "(LEN as --input-len; a table per phase, TTFT/ITL over time as SVG)");
  app.add_option("--scrape-metrics", o->scrape_url,
                 "Prometheus endpoint read while the run lasts (e.g. the planner's http://127.0.0.1:9400/metrics)");
  app.add_option("--scrape-interval", o->scrape_interval_s, "Seconds between scrapes")
      ->check(CLI::Range(0.05, 3600.0));
  app.add_option("--scrape-keys", o->scrape_keys,
                 "Scraped series in the phase table and replica chart, '|'-separated, as "
                 "name{label=value} (default: the planner's desired prefill and decode replicas)");
  app.add_flag("--no-progress", o->no_progress, "No progress line (also off when not a TTY or CI is set)");
  app.add_flag("--no-ignore-eos", o->no_ignore_eos, "Do not send ignore_eos (servers that reject it)");
  app.require_subcommand(0, 1);
  CLI::App* compare = app.add_subcommand("compare", "Two JSON reports side by side, with ratios");
  compare->add_option("a", o->compare_a, "Baseline report (A)")->required();
  compare->add_option("b", o->compare_b, "Report to compare (B)")->required();
  return [o, compare] { return compare->parsed() ? RunCompare(*o) : RunBench(*o); };
}

}  // namespace tandem::cli
