#include "loadgen/phases.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "loadgen/report.h"

namespace tandem::bench {

namespace {

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  if (!text.empty() && text.back() == sep) out.emplace_back();
  return out;
}

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\n") - a + 1);
}

bool PositiveNumber(const std::string& s, double* v) {
  try {
    size_t used = 0;
    *v = std::stod(s, &used);
    return used == s.size() && std::isfinite(*v) && *v > 0;
  } catch (...) {
    return false;
  }
}

}  // namespace

Result<std::vector<PhaseSpec>> ParsePhases(const std::string& spec) {
  std::vector<PhaseSpec> phases;
  std::set<std::string> names;
  double start = 0;
  for (const std::string& raw : Split(spec, ';')) {
    const std::string text = Trim(raw);
    if (text.empty()) continue;
    const size_t colon = text.find(':');
    if (colon == std::string::npos)
      return Err(StatusCode::kInvalidArgument, "phase '{}': expected NAME:key=value,...", text);
    PhaseSpec p;
    p.name = Trim(text.substr(0, colon));
    if (p.name.empty() || !std::all_of(p.name.begin(), p.name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        }))
      return Err(StatusCode::kInvalidArgument, "phase name '{}': expected [A-Za-z0-9._-]+", p.name);
    if (!names.insert(p.name).second)
      return Err(StatusCode::kInvalidArgument, "phase '{}' given twice", p.name);
    std::set<std::string> seen;
    for (const std::string& field : Split(text.substr(colon + 1), ',')) {
      const std::string f = Trim(field);
      const size_t eq = f.find('=');
      const std::string key = Trim(f.substr(0, eq));
      const std::string value = eq == std::string::npos ? "" : Trim(f.substr(eq + 1));
      if (eq == std::string::npos || value.empty())
        return Err(StatusCode::kInvalidArgument, "phase '{}': '{}' is not key=value", p.name, f);
      if (!seen.insert(key).second)
        return Err(StatusCode::kInvalidArgument, "phase '{}': {} given twice", p.name, key);
      if (key == "input" || key == "output") {
        auto d = ParseLengthDist(value);
        if (!d.ok())
          return Err(StatusCode::kInvalidArgument, "phase '{}': {}: {}", p.name, key, d.status().message());
        (key == "input" ? p.input_len : p.output_len) = *d;
      } else if (key == "rate" || key == "duration") {
        if (!PositiveNumber(value, key == "rate" ? &p.rate : &p.duration_s))
          return Err(StatusCode::kInvalidArgument, "phase '{}': {} must be a number > 0, not '{}'",
                     p.name, key, value);
      } else {
        return Err(StatusCode::kInvalidArgument,
                   "phase '{}': unknown key '{}' (input, output, rate, duration)", p.name, key);
      }
    }
    for (const char* k : {"input", "output", "rate", "duration"})
      if (!seen.count(k)) return Err(StatusCode::kInvalidArgument, "phase '{}': {} missing", p.name, k);
    p.start_s = start;
    start += p.duration_s;
    phases.push_back(std::move(p));
  }
  if (phases.empty()) return Err(StatusCode::kInvalidArgument, "--phases: no phase given");
  return phases;
}

std::string PhasesToString(const std::vector<PhaseSpec>& phases) {
  std::string out;
  for (const PhaseSpec& p : phases)
    out += fmt::format("{}{}:input={},output={},rate={:g},duration={:g}", out.empty() ? "" : ";", p.name,
                       p.input_len.ToString(), p.output_len.ToString(), p.rate, p.duration_s);
  return out;
}

namespace {

class PhasedWorkload : public Workload {
 public:
  PhasedWorkload(std::vector<PhaseSpec> phases, std::shared_ptr<const PromptVocab> vocab, uint64_t seed)
      : phases_(std::move(phases)), vocab_(std::move(vocab)), seed_(seed) {
    for (size_t i = 0; i < phases_.size(); ++i) {
      // Each phase its own generator, so a phase's arrivals do not depend on the phases before it.
      std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ULL + 0xF00D + i);
      std::exponential_distribution<double> gap(phases_[i].rate);
      for (double t = gap(rng); t < phases_[i].duration_s; t += gap(rng))
        arrivals_.push_back({phases_[i].start_s + t, static_cast<int>(i)});
    }
  }

  std::optional<WorkItem> Next() override {
    if (next_ >= arrivals_.size()) return std::nullopt;
    const auto [t, phase] = arrivals_[next_];
    const PhaseSpec& p = phases_[phase];
    WorkItem item;
    item.id = next_++;
    item.timestamp_s = t;
    item.phase = phase;
    std::mt19937_64 rng(seed_ ^ (item.id * 0xD1B54A32D192ED03ULL + 0x5EED));
    Turn turn;
    turn.input_tokens = p.input_len.Sample(rng);
    turn.output_tokens = p.output_len.Sample(rng);
    turn.text = vocab_->Words(turn.input_tokens, rng);
    item.turns.push_back(std::move(turn));
    return item;
  }
  bool has_timestamps() const override { return true; }
  bool timestamps_from_zero() const override { return true; }

 private:
  std::vector<PhaseSpec> phases_;
  std::shared_ptr<const PromptVocab> vocab_;
  uint64_t seed_;
  std::vector<std::pair<double, int>> arrivals_;  // (seconds from the start, phase)
  size_t next_ = 0;
};

}  // namespace

std::unique_ptr<Workload> MakePhasedWorkload(const std::vector<PhaseSpec>& phases,
                                             std::shared_ptr<const PromptVocab> vocab, uint64_t seed) {
  return std::make_unique<PhasedWorkload>(phases, std::move(vocab), seed);
}

std::vector<Step> SeriesOf(const std::vector<ScrapeSample>& samples, const std::string& key) {
  std::vector<Step> out;
  for (const ScrapeSample& s : samples)
    if (auto it = s.values.find(key); it != s.values.end()) out.push_back({s.t_s, it->second});
  return out;
}

std::vector<ScaleEvent> ScaleEvents(const std::vector<ScrapeSample>& samples,
                                    const std::vector<std::string>& keys) {
  std::vector<ScaleEvent> events;
  for (const std::string& key : keys) {
    const std::vector<Step> series = SeriesOf(samples, key);
    for (size_t i = 1; i < series.size(); ++i)
      if (series[i].value != series[i - 1].value)
        events.push_back({series[i].t_s, key, series[i - 1].value, series[i].value});
  }
  std::stable_sort(events.begin(), events.end(),
                   [](const ScaleEvent& a, const ScaleEvent& b) { return a.t_s < b.t_s; });
  return events;
}

std::string SeriesLabel(const std::string& key) {
  std::string s = key;
  if (s.rfind("tandem_planner_", 0) == 0) s = s.substr(15);
  if (auto at = s.find("_replicas{role="); at != std::string::npos && s.back() == '}')
    s = s.substr(0, at) + " " + s.substr(at + 15, s.size() - at - 16);
  return s;
}

std::vector<PhaseSummary> SummarizePhases(const RunResult& run, const std::vector<PhaseSpec>& phases,
                                          const Slo& slo, const std::vector<std::string>& keys) {
  std::vector<PhaseSummary> out;
  const std::vector<ScaleEvent> events = ScaleEvents(run.scrapes, keys);
  for (size_t i = 0; i < phases.size(); ++i) {
    const PhaseSpec& p = phases[i];
    RunResult part;
    part.config = run.config;
    part.label = p.name;
    part.duration_s = p.duration_s;
    for (const RequestRecord& r : run.records)
      if (r.phase == static_cast<int>(i)) part.records.push_back(r);
    PhaseSummary s;
    s.spec = p;
    s.run = Summarize(part, slo);
    s.run.request_rate = p.rate;
    s.slo_met_pct = s.run.num_requests > 0 ? 100.0 * s.run.num_slo_met / s.run.num_requests : 0;
    const double end = p.start_s + p.duration_s;
    const bool last = i + 1 == phases.size();  // the last phase runs on until the run ends
    for (const ScrapeSample& sample : run.scrapes) {
      if (sample.t_s < p.start_s || (!last && sample.t_s >= end)) continue;
      for (const std::string& key : keys) {
        auto it = sample.values.find(key);
        if (it == sample.values.end()) continue;
        auto [r, fresh] = s.range.try_emplace(key, it->second, it->second);
        r->second.first = std::min(r->second.first, it->second);
        r->second.second = std::max(r->second.second, it->second);
      }
    }
    for (const ScaleEvent& e : events)
      if (e.t_s >= p.start_s && (last || e.t_s < end)) s.events.push_back(e);
    out.push_back(std::move(s));
  }
  return out;
}

std::string FormatPhaseTable(const std::vector<PhaseSummary>& phases, const std::vector<std::string>& keys) {
  std::string out = "| phase | start s | req/s | in / out tok | ok | failed | SLO met % | goodput req/s |"
                    " TTFT p50 / p99 ms | ITL p50 / p99 ms |";
  for (const std::string& k : keys) out += " " + SeriesLabel(k) + " |";
  out += "\n|---|---:|---:|---|---:|---:|---:|---:|---:|---:|";
  for (size_t i = 0; i < keys.size(); ++i) out += "---:|";
  out += "\n";
  for (const PhaseSummary& p : phases) {
    const RunSummary& r = p.run;
    out += fmt::format("| {} | {:g} | {:g} | {} / {} | {} | {} | {:.1f} | {:.2f} | {:.0f} / {:.0f} | {:.0f} / {:.0f} |",
                       p.spec.name, p.spec.start_s, p.spec.rate, p.spec.input_len.ToString(),
                       p.spec.output_len.ToString(), r.num_ok, r.num_errors, p.slo_met_pct, r.goodput,
                       r.ttft_ms.p50, r.ttft_ms.p99, r.itl_ms.p50, r.itl_ms.p99);
    for (const std::string& k : keys) {
      auto it = p.range.find(k);
      if (it == p.range.end()) out += " - |";
      else if (it->second.first == it->second.second) out += fmt::format(" {:g} |", it->second.first);
      else out += fmt::format(" {:g}..{:g} |", it->second.first, it->second.second);
    }
    out += "\n";
  }
  for (const PhaseSummary& p : phases) {
    for (const ScaleEvent& e : p.events)
      out += fmt::format("scale event: {:.1f} s ({} + {:.1f} s): {} {:g} -> {:g}\n", e.t_s, p.spec.name,
                         e.t_s - p.spec.start_s, SeriesLabel(e.key), e.from, e.to);
    for (const auto& [key, n] : p.run.errors)
      out += fmt::format("failed in {}: {} x {}\n", p.spec.name, n, key);
  }
  return out;
}

nlohmann::json PhaseSummariesToJson(const std::vector<PhaseSummary>& phases) {
  nlohmann::json out = nlohmann::json::array();
  for (const PhaseSummary& p : phases) {
    nlohmann::json range = nlohmann::json::object(), events = nlohmann::json::array();
    for (const auto& [key, r] : p.range) range[key] = {r.first, r.second};
    for (const ScaleEvent& e : p.events) events.push_back({{"t_s", e.t_s}, {"key", e.key}, {"from", e.from}, {"to", e.to}});
    out.push_back({{"name", p.spec.name},
                   {"start_s", p.spec.start_s},
                   {"duration_s", p.spec.duration_s},
                   {"rate", p.spec.rate},
                   {"input_len", p.spec.input_len.ToString()},
                   {"output_len", p.spec.output_len.ToString()},
                   {"slo_met_pct", p.slo_met_pct},
                   {"summary", SummaryToJson(p.run)},
                   {"range", std::move(range)},
                   {"events", std::move(events)}});
  }
  return out;
}

nlohmann::json ScrapesToJson(const std::vector<ScrapeSample>& samples) {
  nlohmann::json out = nlohmann::json::array();
  for (const ScrapeSample& s : samples) out.push_back({{"t_s", s.t_s}, {"values", s.values}});
  return out;
}

}  // namespace tandem::bench
