#include "loadgen/compare.h"

#include <cmath>

#include <fmt/format.h>

namespace tandem::bench {

using json = nlohmann::json;

namespace {

struct Metric {
  const char* name;
  const char* key;     // top-level summary key, or distribution key
  const char* sub;     // nullptr, or "p50" etc. inside the distribution
  bool higher_better;
};

constexpr Metric kMetrics[] = {
    {"requests", "num_requests", nullptr, true},
    {"errors", "num_errors", nullptr, false},
    {"request throughput (req/s)", "request_throughput", nullptr, true},
    {"output throughput (tok/s)", "output_throughput", nullptr, true},
    {"goodput (req/s)", "goodput", nullptr, true},
    {"prefix cache hit rate", "prefix_cache_hit_rate", nullptr, true},
    {"TTFT mean (ms)", "ttft_ms", "mean", false},
    {"TTFT p50 (ms)", "ttft_ms", "p50", false},
    {"TTFT p99 (ms)", "ttft_ms", "p99", false},
    {"ITL p50 (ms)", "itl_ms", "p50", false},
    {"ITL p99 (ms)", "itl_ms", "p99", false},
    {"TPOT mean (ms)", "tpot_ms", "mean", false},
    {"TPOT p99 (ms)", "tpot_ms", "p99", false},
    {"E2E p50 (ms)", "e2e_ms", "p50", false},
    {"E2E p99 (ms)", "e2e_ms", "p99", false},
};

bool IsReport(const json& j) {
  return j.is_object() && j.contains("runs") && j["runs"].is_array();
}

std::optional<double> Value(const json& run, const Metric& m) {
  if (!run.contains(m.key)) return std::nullopt;
  const json* v = &run[m.key];
  if (m.sub) {
    if (!v->is_object() || !v->contains(m.sub)) return std::nullopt;
    v = &(*v)[m.sub];
  }
  if (!v->is_number()) return std::nullopt;
  return v->get<double>();
}

std::string Num(std::optional<double> v) {
  if (!v) return "-";
  return std::abs(*v) >= 100 ? fmt::format("{:.1f}", *v) : fmt::format("{:.3g}", *v);
}

}  // namespace

Result<std::string> CompareReports(const json& a, const json& b, const std::string& name_a,
                                   const std::string& name_b) {
  if (!IsReport(a)) return Err(StatusCode::kInvalidArgument, "{}: not a tandem bench report", name_a);
  if (!IsReport(b)) return Err(StatusCode::kInvalidArgument, "{}: not a tandem bench report", name_b);
  std::string out;
  int matched = 0;
  for (const json& ra : a["runs"]) {
    const std::string label = ra.value("label", "");
    const json* rb = nullptr;
    for (const json& r : b["runs"])
      if (r.value("label", "") == label) rb = &r;
    if (!rb) {
      out += fmt::format("{}: only in {}\n\n", label, name_a);
      continue;
    }
    ++matched;
    out += fmt::format("## {}\n\n| metric | A | B | B/A |\n| :--- | ---: | ---: | ---: |\n", label);
    for (const Metric& m : kMetrics) {
      const auto va = Value(ra, m), vb = Value(*rb, m);
      std::string ratio = "-";
      if (va && vb && *va != 0) {
        const double r = *vb / *va;
        const bool better = m.higher_better ? r > 1.0 : r < 1.0;
        ratio = fmt::format("{:.3f}{}", r, std::abs(r - 1.0) < 0.005 ? "" : (better ? " +" : " -"));
      }
      out += fmt::format("| {} | {} | {} | {} |\n", m.name, Num(va), Num(vb), ratio);
    }
    out += "\n";
  }
  for (const json& rb : b["runs"]) {
    const std::string label = rb.value("label", "");
    bool found = false;
    for (const json& r : a["runs"]) found = found || r.value("label", "") == label;
    if (!found) out += fmt::format("{}: only in {}\n\n", label, name_b);
  }
  if (matched == 0)
    return Err(StatusCode::kInvalidArgument, "no run label is in both {} and {}", name_a, name_b);
  return fmt::format("A = {}\nB = {}\n(+ B better, - B worse)\n\n", name_a, name_b) + out;
}

}  // namespace tandem::bench
