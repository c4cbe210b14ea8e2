#include "loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tandem::bench {

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.size() == 1) return sorted[0];
  const double pos = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

Distribution Summarize(std::vector<double> values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.min = values.front();
  d.max = values.back();
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  double ss = 0;
  for (double v : values) ss += (v - d.mean) * (v - d.mean);
  d.stddev = std::sqrt(ss / static_cast<double>(values.size()));
  d.p50 = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p95 = Percentile(values, 95);
  d.p99 = Percentile(values, 99);
  return d;
}

std::string Slo::ToString() const {
  std::vector<std::string> parts;
  auto add = [&](const char* name, const std::optional<double>& v) {
    if (v) parts.push_back(fmt::format("{}={:g}ms", name, *v * 1000));
  };
  add("ttft", ttft_s);
  add("itl", itl_s);
  add("tpot", tpot_s);
  add("e2e", e2e_s);
  return fmt::format("{}", fmt::join(parts, ","));
}

Result<Slo> ParseSlo(const std::string& text) {
  Slo slo;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    auto bad = [&] {
      return Err(StatusCode::kInvalidArgument,
                 "--slo '{}': expected NAME=VALUE[ms|s|us] with NAME in ttft, itl, tpot, e2e", item);
    };
    if (eq == std::string::npos) return bad();
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    double v = 0;
    size_t used = 0;
    try {
      v = std::stod(value, &used);
    } catch (...) {
      return bad();
    }
    const std::string unit = value.substr(used);
    double scale = 1e-3;
    if (unit == "s") scale = 1;
    else if (unit == "us") scale = 1e-6;
    else if (unit != "ms" && !unit.empty()) return bad();
    if (!(v > 0) || !std::isfinite(v)) return bad();
    v *= scale;
    if (name == "ttft") slo.ttft_s = v;
    else if (name == "itl") slo.itl_s = v;
    else if (name == "tpot") slo.tpot_s = v;
    else if (name == "e2e") slo.e2e_s = v;
    else return bad();
  }
  return slo;
}

double MeanItl(const RequestRecord& r) {
  if (r.chunk_times_s.size() < 2) return -1;
  return (r.chunk_times_s.back() - r.chunk_times_s.front()) /
         static_cast<double>(r.chunk_times_s.size() - 1);
}

double Tpot(const RequestRecord& r) {
  const int tokens = r.completion_tokens >= 0 ? r.completion_tokens : r.num_chunks();
  if (tokens < 2 || r.ttft_s < 0) return -1;
  return (r.e2e_s - r.ttft_s) / (tokens - 1);
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok()) return false;
  if (slo.ttft_s && !(r.ttft_s >= 0 && r.ttft_s <= *slo.ttft_s)) return false;
  if (slo.itl_s && MeanItl(r) > *slo.itl_s) return false;
  if (slo.tpot_s && Tpot(r) > *slo.tpot_s) return false;
  if (slo.e2e_s && r.e2e_s > *slo.e2e_s) return false;
  return true;
}

RunSummary Summarize(const RunResult& run, const Slo& slo) {
  RunSummary s;
  s.label = run.label;
  if (run.config.mode == RunConfig::Mode::kConcurrency) s.concurrency = run.config.concurrency;
  if (run.config.mode == RunConfig::Mode::kRate) s.request_rate = run.config.request_rate;
  s.duration_s = run.duration_s;
  std::vector<double> ttft, itl, tpot, e2e, ttft_first, ttft_returning;
  for (const RequestRecord& r : run.records) {
    ++s.num_requests;
    if (!r.ok()) {
      ++s.num_errors;
      ++s.errors[r.ErrorKey()];
      continue;
    }
    ++s.num_ok;
    if (r.prompt_tokens >= 0) s.total_input_tokens += r.prompt_tokens;
    if (r.prompt_tokens >= 0 && r.cached_tokens >= 0) {
      s.cached_input_tokens += r.cached_tokens;
      s.input_tokens_with_cache_info += r.prompt_tokens;
    }
    const int out = r.completion_tokens >= 0 ? r.completion_tokens : r.num_chunks();
    s.total_output_tokens += out;
    if (r.completion_tokens < 0) ++s.usage_missing;
    else if (r.completion_tokens != r.num_chunks()) ++s.chunk_usage_mismatch;
    if (r.completion_tokens >= 0 && r.completion_tokens != r.expected_output_tokens)
      ++s.output_len_mismatch;
    if (MeetsSlo(r, slo)) ++s.num_slo_met;
    if (r.ttft_s >= 0) {
      ttft.push_back(r.ttft_s * 1000);
      (r.turn > 0 ? ttft_returning : ttft_first).push_back(r.ttft_s * 1000);
    }
    for (size_t i = 1; i < r.chunk_times_s.size(); ++i)
      itl.push_back((r.chunk_times_s[i] - r.chunk_times_s[i - 1]) * 1000);
    if (double t = Tpot(r); t >= 0) tpot.push_back(t * 1000);
    e2e.push_back(r.e2e_s * 1000);
  }
  if (s.duration_s > 0) {
    s.request_throughput = s.num_ok / s.duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / s.duration_s;
    s.total_token_throughput =
        static_cast<double>(s.total_input_tokens + s.total_output_tokens) / s.duration_s;
    s.goodput = s.num_slo_met / s.duration_s;
  }
  if (s.input_tokens_with_cache_info > 0) {
    s.prefix_cache_hit_rate =
        static_cast<double>(s.cached_input_tokens) / static_cast<double>(s.input_tokens_with_cache_info);
  }
  s.ttft_ms = Summarize(std::move(ttft));
  s.itl_ms = Summarize(std::move(itl));
  s.tpot_ms = Summarize(std::move(tpot));
  s.e2e_ms = Summarize(std::move(e2e));
  if (!ttft_returning.empty()) {
    s.ttft_first_turn_ms = Summarize(std::move(ttft_first));
    s.ttft_returning_ms = Summarize(std::move(ttft_returning));
  }
  return s;
}

}  // namespace tandem::bench
