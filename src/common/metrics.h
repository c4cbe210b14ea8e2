// Metrics registry: counters, gauges and histograms with labels, rendered in the Prometheus text
// exposition format (version 0.0.4: "# HELP", "# TYPE", samples; histograms as _bucket{le=...},
// _sum, _count). Thread-safe; Inc/Set/Observe are lock-free or take a short lock.
// Metric names are DESIGN.md section 4's, prefix `tandem_`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tandem::metrics {

using Labels = std::map<std::string, std::string>;

// The Content-Type of RenderText's output.
inline constexpr char kTextContentType[] = "text/plain; version=0.0.4; charset=utf-8";

class Counter {
 public:
  // Counters only go up: a negative or NaN `v` is ignored.
  void Inc(double v = 1.0);
  // Raises the counter to `total`, a running total kept elsewhere (engine or transfer stats read
  // at scrape time); a smaller total (a source that restarted or left) changes nothing.
  void RaiseTo(double total) { Inc(total - value()); }
  double value() const;

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v);
  void Inc(double v = 1.0);
  void Dec(double v = 1.0) { Inc(-v); }
  double value() const;

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // Bounds are sorted and de-duplicated here; NaN and +Inf bounds are dropped (+Inf is implicit).
  explicit Histogram(std::vector<double> upper_bounds);  // sorted; +Inf is implicit
  // Counts `v` in the first bucket with v <= upper bound (NaN: the +Inf bucket).
  void Observe(double v);
  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<uint64_t> cumulative_counts;  // per bound, then +Inf
    double sum = 0.0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last = +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// Default latency buckets in seconds (1 ms .. 60 s).
std::vector<double> LatencyBuckets();

class Registry {
 public:
  Registry();
  ~Registry();  // out of line: Family is defined in metrics.cc
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The same (name, labels) returns the same object; a name keeps the help and type of its first
  // registration. References stay valid for the registry's lifetime.
  // Programming errors throw: an invalid metric or label name (std::invalid_argument; names follow
  // [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* not starting with "__", and a
  // histogram may not use the label "le"), or a name already registered with another type
  // (std::logic_error).
  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& upper_bounds, const Labels& labels = {});
  // Run before each render (e.g. to set gauges from engine stats).
  void AddCollector(std::function<void()> collector);
  // Prometheus text format, families sorted by name; series in label order. Values: integers
  // without exponent when exact (|v| < 1e15), otherwise the shortest round-trip decimal;
  // "+Inf", "-Inf", "NaN". Content type: "text/plain; version=0.0.4; charset=utf-8".
  std::string RenderText() const;

  static Registry& Default();

 private:
  struct Family;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Family>> families_;
  std::vector<std::function<void()>> collectors_;
};

}  // namespace tandem::metrics
