#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include <fmt/format.h>

namespace tandem::metrics {

namespace {

enum class Type { kCounter, kGauge, kHistogram };

const char* TypeName(Type type) {
  switch (type) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

bool IsMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool IsLabelName(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

void CheckNames(const std::string& name, const Labels& labels, bool histogram) {
  if (!IsMetricName(name)) throw std::invalid_argument("invalid metric name: " + name);
  for (const auto& [key, value] : labels) {
    if (!IsLabelName(key)) throw std::invalid_argument("invalid label name: " + key);
    if (histogram && key == "le") {
      throw std::invalid_argument("histogram " + name + " may not use the label \"le\"");
    }
  }
}

// Prometheus spells these as Go's strconv.ParseFloat reads them.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    return fmt::format("{}", static_cast<int64_t>(v));  // also turns -0 into "0"
  }
  return fmt::format("{}", v);  // shortest representation that reads back to the same double
}

// Label values escape backslash, double quote and line feed.
void AppendLabelValue(std::string& out, const std::string& value) {
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
}

// HELP text escapes backslash and line feed only.
std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `{a="x",b="y"}` (nothing for no labels); `le` (if not null) is appended last.
void AppendLabels(std::string& out, const Labels& labels, const std::string* le = nullptr) {
  if (labels.empty() && le == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += key;
    out += "=\"";
    AppendLabelValue(out, value);
    out += '"';
  }
  if (le != nullptr) {
    if (!first) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

void AppendSample(std::string& out, const std::string& name, const Labels& labels, double value,
                  const std::string* le = nullptr) {
  out += name;
  AppendLabels(out, labels, le);
  out += ' ';
  out += FormatValue(value);
  out += '\n';
}

void AtomicAdd(std::atomic<double>& target, double v) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + v, std::memory_order_relaxed)) {
  }
}

}  // namespace

// ---- Counter / Gauge ----

void Counter::Inc(double v) {
  if (!(v >= 0.0)) return;  // negative or NaN
  AtomicAdd(value_, v);
}
double Counter::value() const { return value_.load(std::memory_order_relaxed); }

void Gauge::Set(double v) { value_.store(v, std::memory_order_relaxed); }
void Gauge::Inc(double v) { AtomicAdd(value_, v); }
double Gauge::value() const { return value_.load(std::memory_order_relaxed); }

// ---- Histogram ----

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  bounds_.erase(std::remove_if(bounds_.begin(), bounds_.end(),
                               [](double b) { return std::isnan(b) || b == INFINITY; }),
                bounds_.end());
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::Observe(double v) {
  size_t bucket = bounds_.size();  // +Inf
  if (!std::isnan(v)) {
    bucket = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[bucket];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snap;
  snap.upper_bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  snap.cumulative_counts.resize(counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    running += counts_[i];
    snap.cumulative_counts[i] = running;
  }
  snap.sum = sum_;
  snap.count = count_;
  return snap;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
          30.0, 60.0};
}

// ---- Registry ----

struct Registry::Family {
  Type type;
  std::string help;
  std::map<Labels, std::unique_ptr<Counter>> counters;
  std::map<Labels, std::unique_ptr<Gauge>> gauges;
  std::map<Labels, std::unique_ptr<Histogram>> histograms;
};

Registry::Registry() = default;
Registry::~Registry() = default;

namespace {

template <typename Families, typename FamilyT>
FamilyT& FindOrAddFamily(Families& families, const std::string& name, const std::string& help,
                         Type type) {
  auto it = families.find(name);
  if (it == families.end()) {
    auto family = std::make_unique<FamilyT>();
    family->type = type;
    family->help = help;
    it = families.emplace(name, std::move(family)).first;
  } else if (it->second->type != type) {
    throw std::logic_error(fmt::format("metric {} is a {}, not a {}", name,
                                       TypeName(it->second->type), TypeName(type)));
  }
  return *it->second;
}

}  // namespace

Counter& Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  CheckNames(name, labels, false);
  std::lock_guard<std::mutex> lock(mu_);
  Family& family = FindOrAddFamily<decltype(families_), Family>(families_, name, help,
                                                                Type::kCounter);
  auto& slot = family.counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help,
                          const Labels& labels) {
  CheckNames(name, labels, false);
  std::lock_guard<std::mutex> lock(mu_);
  Family& family = FindOrAddFamily<decltype(families_), Family>(families_, name, help,
                                                                Type::kGauge);
  auto& slot = family.gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& upper_bounds,
                                  const Labels& labels) {
  CheckNames(name, labels, true);
  std::lock_guard<std::mutex> lock(mu_);
  Family& family = FindOrAddFamily<decltype(families_), Family>(families_, name, help,
                                                                Type::kHistogram);
  auto& slot = family.histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(upper_bounds);
  return *slot;
}

void Registry::AddCollector(std::function<void()> collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::RenderText() const {
  // Collectors run without the lock: they typically call GetGauge(...).Set(...).
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (const auto& collect : collectors) collect();

  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, family] : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, EscapeHelp(family->help), name,
                       TypeName(family->type));
    switch (family->type) {
      case Type::kCounter:
        for (const auto& [labels, counter] : family->counters) {
          AppendSample(out, name, labels, counter->value());
        }
        break;
      case Type::kGauge:
        for (const auto& [labels, gauge] : family->gauges) {
          AppendSample(out, name, labels, gauge->value());
        }
        break;
      case Type::kHistogram:
        for (const auto& [labels, histogram] : family->histograms) {
          Histogram::Snapshot snap = histogram->snapshot();
          const std::string bucket_name = name + "_bucket";
          for (size_t i = 0; i < snap.cumulative_counts.size(); ++i) {
            std::string le = i < snap.upper_bounds.size() ? FormatValue(snap.upper_bounds[i])
                                                          : std::string("+Inf");
            AppendSample(out, bucket_name, labels,
                         static_cast<double>(snap.cumulative_counts[i]), &le);
          }
          AppendSample(out, name + "_sum", labels, snap.sum);
          AppendSample(out, name + "_count", labels, static_cast<double>(snap.count));
        }
        break;
    }
  }
  return out;
}

Registry& Registry::Default() {
  static Registry* registry = new Registry();  // never destroyed: used from any thread at exit
  return *registry;
}

}  // namespace tandem::metrics
