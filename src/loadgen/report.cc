#include "loadgen/report.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "loadgen/svg.h"

namespace tandem::bench {

using json = nlohmann::json;

namespace {

std::string Ms(double v) { return v >= 100 ? fmt::format("{:.0f}", v) : fmt::format("{:.1f}", v); }

std::string Pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

json DistJson(const Distribution& d) {
  return json{{"count", d.count}, {"mean", d.mean}, {"std", d.stddev}, {"min", d.min},
              {"max", d.max},     {"p50", d.p50},   {"p90", d.p90},    {"p95", d.p95},
              {"p99", d.p99}};
}

std::string FileLabel(const std::string& label) {
  std::string out;
  for (char c : label) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-') out += c;
  }
  return out.empty() ? "run" : out;
}

}  // namespace

std::string FormatTable(const std::vector<RunSummary>& summaries) {
  const std::vector<std::string> head = {
      "run", "requests", "errors", "req/s", "out tok/s", "goodput req/s", "prefix hit %",
      "TTFT mean ms", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "TPOT p50 ms", "E2E p50 ms", "E2E p99 ms"};
  std::vector<std::vector<std::string>> rows;
  for (const RunSummary& s : summaries) {
    rows.push_back({s.label, std::to_string(s.num_requests), std::to_string(s.num_errors),
                    fmt::format("{:.2f}", s.request_throughput),
                    fmt::format("{:.1f}", s.output_throughput), fmt::format("{:.2f}", s.goodput),
                    s.prefix_cache_hit_rate < 0 ? std::string("-")
                                                : fmt::format("{:.1f}", 100 * s.prefix_cache_hit_rate),
                    Ms(s.ttft_ms.mean), Ms(s.ttft_ms.p50), Ms(s.ttft_ms.p99), Ms(s.itl_ms.p50), Ms(s.itl_ms.p99),
                    Ms(s.tpot_ms.p50), Ms(s.e2e_ms.p50), Ms(s.e2e_ms.p99)});
  }
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  std::string out = "|";
  for (size_t c = 0; c < head.size(); ++c) out += " " + Pad(head[c], width[c], c > 0) + " |";
  out += "\n|";
  for (size_t c = 0; c < head.size(); ++c)
    out += c == 0 ? " :" + std::string(width[c] - 1, '-') + " |" : " " + std::string(width[c] - 1, '-') + ": |";
  out += "\n";
  for (const auto& r : rows) {
    out += "|";
    for (size_t c = 0; c < head.size(); ++c) out += " " + Pad(r[c], width[c], c > 0) + " |";
    out += "\n";
  }
  for (const RunSummary& s : summaries) {
    std::string notes;
    for (const auto& [kind, n] : s.errors) notes += fmt::format(" {}: {};", kind, n);
    if (s.usage_missing) notes += fmt::format(" no usage: {};", s.usage_missing);
    if (s.chunk_usage_mismatch)
      notes += fmt::format(" content chunks != usage tokens: {};", s.chunk_usage_mismatch);
    if (s.output_len_mismatch)
      notes += fmt::format(" usage tokens != max_tokens: {};", s.output_len_mismatch);
    if (!notes.empty()) out += fmt::format("{}:{}\n", s.label, notes);
    if (s.ttft_returning_ms.count > 0) {
      out += fmt::format("{}: TTFT first turns mean {} ms, p50 {} ms ({}); returning turns mean {} ms, "
                         "p50 {} ms ({})\n",
                         s.label, Ms(s.ttft_first_turn_ms.mean), Ms(s.ttft_first_turn_ms.p50),
                         s.ttft_first_turn_ms.count, Ms(s.ttft_returning_ms.mean),
                         Ms(s.ttft_returning_ms.p50), s.ttft_returning_ms.count);
    }
  }
  return out;
}

json SummaryToJson(const RunSummary& s) {
  return json{{"label", s.label},
              {"concurrency", s.concurrency},
              {"request_rate", s.request_rate},
              {"duration_s", s.duration_s},
              {"num_requests", s.num_requests},
              {"num_ok", s.num_ok},
              {"num_errors", s.num_errors},
              {"errors", s.errors},
              {"total_input_tokens", s.total_input_tokens},
              {"total_output_tokens", s.total_output_tokens},
              {"cached_input_tokens", s.cached_input_tokens},
              {"prefix_cache_hit_rate",
               s.prefix_cache_hit_rate < 0 ? json(nullptr) : json(s.prefix_cache_hit_rate)},
              {"request_throughput", s.request_throughput},
              {"output_throughput", s.output_throughput},
              {"total_token_throughput", s.total_token_throughput},
              {"goodput", s.goodput},
              {"num_slo_met", s.num_slo_met},
              {"usage_missing", s.usage_missing},
              {"chunk_usage_mismatch", s.chunk_usage_mismatch},
              {"output_len_mismatch", s.output_len_mismatch},
              {"ttft_ms", DistJson(s.ttft_ms)},
              {"itl_ms", DistJson(s.itl_ms)},
              {"tpot_ms", DistJson(s.tpot_ms)},
              {"e2e_ms", DistJson(s.e2e_ms)},
              {"ttft_first_turn_ms", DistJson(s.ttft_first_turn_ms)},
              {"ttft_returning_ms", DistJson(s.ttft_returning_ms)}};
}

json ReportToJson(const json& config, const std::vector<RunResult>& runs,
                  const std::vector<RunSummary>& summaries) {
  json out{{"tool", "tandem bench"}, {"version", 1}, {"config", config}, {"runs", json::array()}};
  for (size_t i = 0; i < runs.size(); ++i) {
    json run = SummaryToJson(summaries[i]);
    json requests = json::array();
    for (const RequestRecord& r : runs[i].records) {
      const double tpot = Tpot(r);
      requests.push_back({{"item_id", r.item_id},
                          {"turn", r.turn},
                          {"phase", r.phase},
                          {"start_s", r.start_s},
                          {"mean_itl_ms", MeanItl(r) >= 0 ? json(MeanItl(r) * 1000) : json(nullptr)},
                          {"ttft_ms", r.ttft_s >= 0 ? json(r.ttft_s * 1000) : json(nullptr)},
                          {"e2e_ms", r.e2e_s * 1000},
                          {"tpot_ms", tpot >= 0 ? json(tpot * 1000) : json(nullptr)},
                          {"num_chunks", r.num_chunks()},
                          {"prompt_tokens", r.prompt_tokens},
                          {"completion_tokens", r.completion_tokens},
                          {"cached_tokens", r.cached_tokens},
                          {"expected_input_tokens", r.expected_input_tokens},
                          {"expected_output_tokens", r.expected_output_tokens},
                          {"error", r.ok() ? json(nullptr) : json(r.ErrorKey())},
                          {"error_message", r.error_message},
                          {"output_text", r.output_text}});
    }
    run["requests"] = std::move(requests);
    out["runs"].push_back(std::move(run));
  }
  return out;
}

std::string FormatCsv(const std::vector<RunSummary>& summaries) {
  std::string out =
      "label,concurrency,request_rate,duration_s,num_requests,num_ok,num_errors,"
      "total_input_tokens,total_output_tokens,request_throughput,output_throughput,"
      "total_token_throughput,goodput,chunk_usage_mismatch,output_len_mismatch,"
      "prefix_cache_hit_rate";
  for (const char* m : {"ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"})
    for (const char* q : {"mean", "p50", "p90", "p99"}) out += fmt::format(",{}_{}", m, q);
  out += "\n";
  for (const RunSummary& s : summaries) {
    out += fmt::format("\"{}\",{},{:g},{:.6g},{},{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{},{}",
                       s.label, s.concurrency, s.request_rate, s.duration_s, s.num_requests,
                       s.num_ok, s.num_errors, s.total_input_tokens, s.total_output_tokens,
                       s.request_throughput, s.output_throughput, s.total_token_throughput,
                       s.goodput, s.chunk_usage_mismatch, s.output_len_mismatch);
    out += s.prefix_cache_hit_rate < 0 ? std::string(",") : fmt::format(",{:.6g}", s.prefix_cache_hit_rate);
    for (const Distribution* d : {&s.ttft_ms, &s.itl_ms, &s.tpot_ms, &s.e2e_ms})
      out += fmt::format(",{:.6g},{:.6g},{:.6g},{:.6g}", d->mean, d->p50, d->p90, d->p99);
    out += "\n";
  }
  return out;
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) return Err(StatusCode::kFailedPrecondition, "cannot write {}", path);
  f << text;
  f.close();
  if (!f) return Err(StatusCode::kDataLoss, "writing {} failed", path);
  return Status::Ok();
}

Result<std::vector<std::string>> WriteSvgCharts(const std::string& dir,
                                                const std::vector<RunResult>& runs,
                                                const std::vector<RunSummary>& summaries) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Err(StatusCode::kFailedPrecondition, "cannot create {}: {}", dir, ec.message());
  std::vector<std::string> written;
  auto write = [&](const std::string& name, const std::string& svg) -> Status {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (Status st = WriteTextFile(path, svg); !st.ok()) return st;
    written.push_back(path);
    return Status::Ok();
  };
  std::vector<ChartSeries> series(6);
  const char* names[] = {"TTFT p50", "TTFT p99", "TPOT p50", "ITL p99", "E2E p50", "E2E p99"};
  for (size_t k = 0; k < series.size(); ++k) series[k].name = names[k];
  for (const RunSummary& s : summaries) {
    const double x = s.output_throughput;
    const double ys[] = {s.ttft_ms.p50, s.ttft_ms.p99, s.tpot_ms.p50,
                         s.itl_ms.p99,  s.e2e_ms.p50,  s.e2e_ms.p99};
    for (size_t k = 0; k < series.size(); ++k) {
      series[k].points.emplace_back(x, ys[k]);
      series[k].point_labels.push_back(k == 0 || k == 4 ? s.label : "");
    }
  }
  if (Status st = write("latency_vs_throughput.svg",
                        LineChart("Latency vs output throughput", "output tokens/s (all requests)",
                                  "latency, ms (log scale)", series, /*log_y=*/true));
      !st.ok())
    return st;
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<double> ttft, itl;
    for (const RequestRecord& r : runs[i].records) {
      if (!r.ok()) continue;
      if (r.ttft_s >= 0) ttft.push_back(r.ttft_s * 1000);
      for (size_t k = 1; k < r.chunk_times_s.size(); ++k)
        itl.push_back((r.chunk_times_s[k] - r.chunk_times_s[k - 1]) * 1000);
    }
    const std::string label = FileLabel(summaries[i].label);
    Status st = write("ttft_hist_" + label + ".svg",
                      HistogramChart("TTFT, " + summaries[i].label, "time to first token, ms", "requests", ttft));
    if (st.ok())
      st = write("itl_hist_" + label + ".svg",
                 HistogramChart("ITL, " + summaries[i].label, "inter-token latency, ms", "token gaps", itl));
    if (!st.ok()) return st;
  }
  return written;
}

}  // namespace tandem::bench
