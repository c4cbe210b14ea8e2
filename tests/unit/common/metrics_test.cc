// Metrics registry tests: the rendered text is read back by a small parser written here from the
// Prometheus text exposition format 0.0.4 spec (not from metrics.cc).
#include "common/metrics.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tandem::metrics {
namespace {

struct Sample {
  std::string name;
  Labels labels;
  std::string raw_value;  // as written
  double value = 0.0;
};

struct Parsed {
  std::map<std::string, std::string> help;  // unescaped
  std::map<std::string, std::string> type;
  std::vector<Sample> samples;
  std::vector<std::string> family_order;  // names in # TYPE order
};

// Go's strconv.ParseFloat accepts these spellings; Prometheus writes "+Inf", "-Inf", "NaN".
std::optional<double> ParseValue(const std::string& s) {
  if (s == "+Inf" || s == "Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  if (s == "NaN") return NAN;
  if (s.empty()) return std::nullopt;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return std::nullopt;
    }
  }
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

bool IsNameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// Throws std::runtime_error on anything the format does not allow.
Parsed Parse(const std::string& text) {
  Parsed out;
  if (!text.empty() && text.back() != '\n') throw std::runtime_error("no final line feed");
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# HELP name text" / "# TYPE name type"; other comments are ignored.
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
        std::string rest = line.substr(7);
        size_t sp = rest.find(' ');
        if (sp == std::string::npos) throw std::runtime_error("bad comment: " + line);
        std::string name = rest.substr(0, sp);
        std::string arg = rest.substr(sp + 1);
        if (line[2] == 'H') {
          std::string unescaped;
          for (size_t i = 0; i < arg.size(); ++i) {
            if (arg[i] == '\\' && i + 1 < arg.size()) {
              char n = arg[++i];
              if (n == 'n') unescaped += '\n';
              else if (n == '\\') unescaped += '\\';
              else throw std::runtime_error("bad help escape");
            } else {
              unescaped += arg[i];
            }
          }
          out.help[name] = unescaped;
        } else {
          if (arg != "counter" && arg != "gauge" && arg != "histogram" && arg != "summary" &&
              arg != "untyped") {
            throw std::runtime_error("bad type: " + arg);
          }
          if (out.type.count(name)) throw std::runtime_error("TYPE twice: " + name);
          out.type[name] = arg;
          out.family_order.push_back(name);
        }
      }
      continue;
    }
    Sample s;
    size_t i = 0;
    while (i < line.size() && IsNameChar(line[i], i == 0)) s.name += line[i++];
    if (s.name.empty()) throw std::runtime_error("no metric name: " + line);
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::string key;
        while (i < line.size() && line[i] != '=') key += line[i++];
        if (i + 1 >= line.size() || line[i + 1] != '"') throw std::runtime_error("bad label");
        i += 2;
        std::string value;
        for (;;) {
          if (i >= line.size()) throw std::runtime_error("unterminated label value");
          char c = line[i++];
          if (c == '"') break;
          if (c == '\\') {
            if (i >= line.size()) throw std::runtime_error("bad escape");
            char n = line[i++];
            if (n == '\\') value += '\\';
            else if (n == '"') value += '"';
            else if (n == 'n') value += '\n';
            else throw std::runtime_error("bad label escape");
          } else {
            value += c;
          }
        }
        if (s.labels.count(key)) throw std::runtime_error("duplicate label " + key);
        s.labels[key] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) throw std::runtime_error("unterminated labels");
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') throw std::runtime_error("no value: " + line);
    ++i;
    std::string rest = line.substr(i);
    size_t sp = rest.find(' ');  // an optional timestamp follows
    s.raw_value = rest.substr(0, sp);
    auto v = ParseValue(s.raw_value);
    if (!v) throw std::runtime_error("bad value: " + s.raw_value);
    s.value = *v;
    out.samples.push_back(std::move(s));
  }
  return out;
}

const Sample* Find(const Parsed& p, const std::string& name, const Labels& labels = {}) {
  for (const auto& s : p.samples) {
    if (s.name == name && s.labels == labels) return &s;
  }
  return nullptr;
}

TEST(MetricsTest, CountersAndGaugesRender) {
  Registry r;
  r.GetCounter("tandem_requests_total", "Requests by status.", {{"status", "ok"}}).Inc();
  r.GetCounter("tandem_requests_total", "ignored", {{"status", "ok"}}).Inc(2);
  r.GetCounter("tandem_requests_total", "ignored", {{"status", "error"}}).Inc();
  r.GetGauge("tandem_kv_blocks_used", "KV blocks in use.").Set(17);
  r.GetGauge("tandem_kv_blocks_used", "x").Dec(2);
  Parsed p = Parse(r.RenderText());
  EXPECT_EQ(p.type["tandem_requests_total"], "counter");
  EXPECT_EQ(p.help["tandem_requests_total"], "Requests by status.");
  EXPECT_EQ(p.type["tandem_kv_blocks_used"], "gauge");
  ASSERT_NE(Find(p, "tandem_requests_total", {{"status", "ok"}}), nullptr);
  EXPECT_EQ(Find(p, "tandem_requests_total", {{"status", "ok"}})->value, 3.0);
  EXPECT_EQ(Find(p, "tandem_requests_total", {{"status", "error"}})->value, 1.0);
  EXPECT_EQ(Find(p, "tandem_kv_blocks_used")->raw_value, "15");
  // Families sorted by name.
  EXPECT_EQ(p.family_order,
            (std::vector<std::string>{"tandem_kv_blocks_used", "tandem_requests_total"}));
  EXPECT_EQ(p.samples.size(), 3u);
}

TEST(MetricsTest, RaiseToFollowsARunningTotalAndNeverGoesDown) {
  Registry r;
  Counter& c = r.GetCounter("tandem_test_raised_total", "help");
  c.RaiseTo(5);
  EXPECT_EQ(c.value(), 5);
  c.RaiseTo(3);  // the source restarted: the counter keeps what it counted
  EXPECT_EQ(c.value(), 5);
  c.RaiseTo(7.5);
  EXPECT_EQ(c.value(), 7.5);
}

TEST(MetricsTest, SameNameAndLabelsReturnSameObject) {
  Registry r;
  Counter& a = r.GetCounter("tandem_x_total", "h", {{"a", "1"}});
  Counter& b = r.GetCounter("tandem_x_total", "h", {{"a", "1"}});
  Counter& c = r.GetCounter("tandem_x_total", "h", {{"a", "2"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  a.Inc(-5);  // ignored: counters only go up
  a.Inc(NAN);
  EXPECT_EQ(a.value(), 0.0);
}

TEST(MetricsTest, MisuseThrows) {
  Registry r;
  r.GetCounter("tandem_y_total", "h");
  EXPECT_THROW(r.GetGauge("tandem_y_total", "h"), std::logic_error);
  EXPECT_THROW(r.GetCounter("9bad", "h"), std::invalid_argument);
  EXPECT_THROW(r.GetCounter("bad-name", "h"), std::invalid_argument);
  EXPECT_THROW(r.GetCounter("tandem_z", "h", {{"__reserved", "x"}}), std::invalid_argument);
  EXPECT_THROW(r.GetCounter("tandem_z", "h", {{"bad label", "x"}}), std::invalid_argument);
  EXPECT_THROW(r.GetHistogram("tandem_h", "h", {1.0}, {{"le", "x"}}), std::invalid_argument);
  EXPECT_NO_THROW(Parse(r.RenderText()));
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  Registry r;
  const std::string tricky = "a\\b\"c\nd} e,f=\"g";
  r.GetCounter("tandem_esc_total", "line one\nback\\slash \"quoted\"", {{"v", tricky}}).Inc();
  std::string text = r.RenderText();
  // Raw text: escapes as the spec writes them, and no raw line feed inside a sample line.
  EXPECT_NE(text.find("v=\"a\\\\b\\\"c\\nd} e,f=\\\"g\""), std::string::npos) << text;
  EXPECT_NE(text.find("# HELP tandem_esc_total line one\\nback\\\\slash \"quoted\"\n"),
            std::string::npos)
      << text;
  Parsed p = Parse(text);
  ASSERT_EQ(p.samples.size(), 1u);
  EXPECT_EQ(p.samples[0].labels.at("v"), tricky);
  EXPECT_EQ(p.help["tandem_esc_total"], "line one\nback\\slash \"quoted\"");
}

TEST(MetricsTest, NumbersAsPrometheusReadsThem) {
  Registry r;
  struct Case {
    std::string name;
    double v;
    std::string want;
  };
  std::vector<Case> cases = {{"g_int", 42, "42"},          {"g_big", 1e12, "1000000000000"},
                             {"g_neg", -7, "-7"},          {"g_zero", -0.0, "0"},
                             {"g_half", 0.5, "0.5"},       {"g_tenth", 0.1, "0.1"},
                             {"g_pinf", INFINITY, "+Inf"}, {"g_ninf", -INFINITY, "-Inf"},
                             {"g_nan", NAN, "NaN"}};
  for (const auto& c : cases) r.GetGauge(c.name, "h").Set(c.v);
  r.GetGauge("g_small", "h").Set(1.25e-7);
  r.GetGauge("g_huge", "h").Set(3.5e300);
  Parsed p = Parse(r.RenderText());
  for (const auto& c : cases) {
    const Sample* s = Find(p, c.name);
    ASSERT_NE(s, nullptr) << c.name;
    EXPECT_EQ(s->raw_value, c.want) << c.name;
  }
  EXPECT_EQ(Find(p, "g_small")->value, 1.25e-7);  // round-trips exactly
  EXPECT_EQ(Find(p, "g_huge")->value, 3.5e300);
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Registry r;
  // Unsorted with a duplicate and an explicit +Inf: sorted, de-duplicated, +Inf implicit.
  Histogram& h = r.GetHistogram("tandem_ttft_seconds", "Time to first token.",
                                {1.0, 0.1, 0.5, 0.5, INFINITY}, {{"model", "tiny"}});
  for (double v : {0.05, 0.1, 0.2, 0.5, 0.7, 3.0, 100.0}) h.Observe(v);
  Parsed p = Parse(r.RenderText());
  EXPECT_EQ(p.type["tandem_ttft_seconds"], "histogram");
  std::vector<std::pair<std::string, double>> buckets;
  for (const auto& s : p.samples) {
    if (s.name != "tandem_ttft_seconds_bucket") continue;
    EXPECT_EQ(s.labels.at("model"), "tiny");
    buckets.emplace_back(s.labels.at("le"), s.value);
  }
  std::vector<std::pair<std::string, double>> want = {
      {"0.1", 2}, {"0.5", 4}, {"1", 5}, {"+Inf", 7}};
  EXPECT_EQ(buckets, want);
  for (size_t i = 1; i < buckets.size(); ++i) EXPECT_GE(buckets[i].second, buckets[i - 1].second);
  EXPECT_EQ(Find(p, "tandem_ttft_seconds_count", {{"model", "tiny"}})->value, 7);
  EXPECT_DOUBLE_EQ(Find(p, "tandem_ttft_seconds_sum", {{"model", "tiny"}})->value,
                   0.05 + 0.1 + 0.2 + 0.5 + 0.7 + 3.0 + 100.0);
  Histogram::Snapshot snap = h.snapshot();
  EXPECT_EQ(snap.upper_bounds, (std::vector<double>{0.1, 0.5, 1.0}));
  EXPECT_EQ(snap.cumulative_counts, (std::vector<uint64_t>{2, 4, 5, 7}));
}

TEST(MetricsTest, LatencyBucketsSpanMillisecondToMinute) {
  auto b = LatencyBuckets();
  ASSERT_FALSE(b.empty());
  EXPECT_DOUBLE_EQ(b.front(), 0.001);
  EXPECT_DOUBLE_EQ(b.back(), 60.0);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
}

TEST(MetricsTest, CollectorsRunBeforeRender) {
  Registry r;
  int calls = 0;
  r.AddCollector([&] { r.GetGauge("tandem_collected", "h").Set(++calls); });
  Parsed p = Parse(r.RenderText());
  EXPECT_EQ(Find(p, "tandem_collected")->value, 1);
  p = Parse(r.RenderText());
  EXPECT_EQ(Find(p, "tandem_collected")->value, 2);
}

TEST(MetricsTest, ConcurrentUpdatesAreExact) {
  Registry r;
  constexpr int kThreads = 8;
  constexpr int kIters = 20000;
  std::atomic<bool> done{false};
  std::thread renderer([&] {
    while (!done.load()) Parse(r.RenderText());  // renders concurrently, always well-formed
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Counter& c = r.GetCounter("tandem_c_total", "h");
      Gauge& g = r.GetGauge("tandem_g", "h");
      Histogram& h = r.GetHistogram("tandem_h", "h", {0.5});
      for (int i = 0; i < kIters; ++i) {
        c.Inc();
        g.Inc(0.5);
        h.Observe(i % 2 == 0 ? 0.25 : 1.0);
        // New series created concurrently too.
        r.GetCounter("tandem_per_thread_total", "h", {{"t", std::to_string(t)}}).Inc();
      }
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  renderer.join();
  Parsed p = Parse(r.RenderText());
  EXPECT_EQ(Find(p, "tandem_c_total")->value, kThreads * kIters);
  EXPECT_EQ(Find(p, "tandem_g")->value, kThreads * kIters * 0.5);
  EXPECT_EQ(Find(p, "tandem_h_count")->value, kThreads * kIters);
  EXPECT_EQ(Find(p, "tandem_h_bucket", {{"le", "0.5"}})->value, kThreads * kIters / 2);
  EXPECT_EQ(Find(p, "tandem_h_bucket", {{"le", "+Inf"}})->value, kThreads * kIters);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(Find(p, "tandem_per_thread_total", {{"t", std::to_string(t)}})->value, kIters);
  }
}

TEST(MetricsTest, DefaultRegistryIsShared) {
  EXPECT_EQ(&Registry::Default(), &Registry::Default());
}

}  // namespace
}  // namespace tandem::metrics
