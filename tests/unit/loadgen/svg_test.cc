#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "loadgen/compare.h"
#include "loadgen/report.h"
#include "loadgen/svg.h"

namespace tandem::bench {
namespace {

// A tiny well-formedness check: tags balance, attributes are quoted, text holds no raw '<' and
// only the five XML entities.
::testing::AssertionResult WellFormed(const std::string& xml) {
  std::vector<std::string> stack;
  size_t i = 0;
  bool root_seen = false;
  while (i < xml.size()) {
    if (xml[i] == '<') {
      size_t end = xml.find('>', i);
      if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
      std::string tag = xml.substr(i + 1, end - i - 1);
      i = end + 1;
      if (tag.front() == '?') continue;
      if (tag.front() == '/') {
        if (stack.empty() || stack.back() != tag.substr(1))
          return ::testing::AssertionFailure() << "mismatched </" << tag.substr(1) << ">";
        stack.pop_back();
        continue;
      }
      const bool self_closing = tag.back() == '/';
      if (self_closing) tag.pop_back();
      const std::string name = tag.substr(0, tag.find_first_of(" \n"));
      if (stack.empty() && root_seen) return ::testing::AssertionFailure() << "two roots";
      root_seen = true;
      // attributes: name="value" pairs
      size_t p = name.size();
      while (p < tag.size()) {
        while (p < tag.size() && tag[p] == ' ') ++p;
        if (p >= tag.size()) break;
        size_t eq = tag.find('=', p);
        if (eq == std::string::npos || eq + 1 >= tag.size() || tag[eq + 1] != '"')
          return ::testing::AssertionFailure() << "unquoted attribute in <" << tag << ">";
        size_t close = tag.find('"', eq + 2);
        if (close == std::string::npos) return ::testing::AssertionFailure() << "open quote";
        const std::string value = tag.substr(eq + 2, close - eq - 2);
        if (value.find('<') != std::string::npos) return ::testing::AssertionFailure() << "< in attribute";
        p = close + 1;
      }
      if (!self_closing) stack.push_back(name);
    } else {
      if (xml[i] == '&') {
        size_t semi = xml.find(';', i);
        const std::string ent = xml.substr(i, semi - i + 1);
        if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;")
          return ::testing::AssertionFailure() << "bad entity " << ent;
      }
      ++i;
    }
  }
  if (!stack.empty()) return ::testing::AssertionFailure() << "unclosed <" << stack.back() << ">";
  return ::testing::AssertionSuccess();
}

void XmllintIfAvailable(const std::string& xml) {
  if (std::system("command -v xmllint >/dev/null 2>&1") != 0) return;
  const std::string path = ::testing::TempDir() + "/chart.svg";
  { std::ofstream(path) << xml; }
  EXPECT_EQ(std::system(("xmllint --noout " + path).c_str()), 0);
}

TEST(Svg, ChartsAreWellFormed) {
  std::vector<ChartSeries> series(2);
  series[0].name = "TTFT p50 <&>";
  series[0].points = {{10, 5}, {40, 12}, {120, 300}};
  series[0].point_labels = {"c=1", "c=4", "c=\"16\""};
  series[1].name = "ITL p99";
  series[1].points = {{10, 1}, {40, 0}, {120, 2}};  // 0 skipped on the log axis
  for (bool log_y : {true, false}) {
    const std::string svg = LineChart("Latency & throughput", "tok/s", "ms", series, log_y);
    EXPECT_TRUE(WellFormed(svg));
    EXPECT_NE(svg.find("&lt;&amp;&gt;"), std::string::npos);
    XmllintIfAvailable(svg);
  }
  std::vector<double> values;
  for (int i = 0; i < 500; ++i) values.push_back(10 + (i % 37) * 0.7 + (i == 499 ? 1000 : 0));
  const std::string hist = HistogramChart("TTFT", "ms", "requests", values);
  EXPECT_TRUE(WellFormed(hist));
  XmllintIfAvailable(hist);
  EXPECT_TRUE(WellFormed(HistogramChart("empty", "ms", "n", {})));
  EXPECT_TRUE(WellFormed(HistogramChart("one", "ms", "n", {3})));
  EXPECT_TRUE(WellFormed(LineChart("empty", "x", "y", {}, true)));
  EXPECT_FALSE(WellFormed("<svg><g></svg>"));
  EXPECT_FALSE(WellFormed("<svg a=1/>"));
}

TEST(Svg, NiceTicks) {
  auto t = NiceTicks(0, 97);
  EXPECT_EQ(t.front(), 0);
  EXPECT_GE(t.back(), 97);
  EXPECT_LE(t.size(), 12u);
  EXPECT_EQ(TickLabel(1500), "1500");
  EXPECT_EQ(TickLabel(25000), "25k");
}

RunResult FakeRun(const std::string& label, double ttft) {
  RunResult run;
  run.label = label;
  run.duration_s = 1;
  for (int i = 0; i < 10; ++i) {
    RequestRecord r;
    r.ttft_s = ttft + i * 0.001;
    r.chunk_times_s = {r.ttft_s, r.ttft_s + 0.01, r.ttft_s + 0.02};
    r.e2e_s = r.ttft_s + 0.03;
    r.completion_tokens = 3;
    r.expected_output_tokens = 3;
    run.records.push_back(r);
  }
  return run;
}

TEST(Report, TableJsonCsvSvgAndCompare) {
  std::vector<RunResult> runs = {FakeRun("c=1", 0.05), FakeRun("c=4", 0.1)};
  std::vector<RunSummary> sums;
  for (const auto& r : runs) sums.push_back(Summarize(r, Slo{}));
  const std::string table = FormatTable(sums);
  EXPECT_NE(table.find("| c=4"), std::string::npos);
  const auto j = ReportToJson({{"url", "x"}}, runs, sums);
  EXPECT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][0]["requests"].size(), 10u);
  EXPECT_NEAR(j["runs"][1]["ttft_ms"]["min"].get<double>(), 100, 1e-9);
  const std::string csv = FormatCsv(sums);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
  const std::string dir = ::testing::TempDir() + "/bench_svg";
  auto files = WriteSvgCharts(dir, runs, sums);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->size(), 5u);
  for (const auto& f : *files) {
    std::ifstream in(f);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_TRUE(WellFormed(text)) << f;
  }
  auto b = j;
  b["runs"][0]["ttft_ms"]["p50"] = j["runs"][0]["ttft_ms"]["p50"].get<double>() * 2;
  auto cmp = CompareReports(j, b, "A.json", "B.json");
  ASSERT_TRUE(cmp.ok());
  EXPECT_NE(cmp->find("| TTFT p50 (ms) |"), std::string::npos);
  EXPECT_NE(cmp->find("2.000 -"), std::string::npos);
  EXPECT_FALSE(CompareReports(j, nlohmann::json::object(), "A", "B").ok());
}

}  // namespace
}  // namespace tandem::bench
