// The planner's Prometheus text reader (planner/prom_text.h) against the official Python client's
// parser (prometheus_client.parser, tests/tools/parse_prom.py): our own registry's rendering and
// hand-written text with escapes, timestamps, comments and non-finite values give the same
// samples; lines both refuse are errors here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/metrics.h"
#include "planner/prom_text.h"

namespace tandem::planner {
namespace {

// Runs the Python parser on `text`: its samples as JSON, or nullopt when it refused the text.
std::optional<nlohmann::json> PythonParse(const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("prom_text_" + std::to_string(getpid()) + ".txt")).string();
  std::ofstream(path) << text;
  const std::string cmd = "/usr/bin/python3 " TANDEM_TESTS_DIR "/tools/parse_prom.py '" + path + "' 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  std::filesystem::remove(path);
  if (rc != 0) return std::nullopt;
  return nlohmann::json::parse(out);
}

double JsonValue(const nlohmann::json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return s == "NaN" ? NAN : s == "+Inf" ? INFINITY : -INFINITY;
  }
  return v.get<double>();
}

void ExpectSameAsPython(const std::string& text) {
  SCOPED_TRACE(text.substr(0, 300));
  auto ours = ParsePromText(text);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  auto ref = PythonParse(text);
  ASSERT_TRUE(ref.has_value()) << "the Python client refused the text";
  ASSERT_EQ(ours->size(), ref->size());
  for (size_t i = 0; i < ours->size(); ++i) {
    const PromSample& s = (*ours)[i];
    const nlohmann::json& r = (*ref)[i];
    EXPECT_EQ(s.name, r[0].get<std::string>()) << i;
    EXPECT_EQ(s.labels, (r[1].get<std::map<std::string, std::string>>())) << s.name;
    const double want = JsonValue(r[2]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(s.value)) << s.name;
    } else {
      EXPECT_EQ(s.value, want) << s.name;
    }
  }
}

TEST(PromText, OurRegistrysRenderingReadsAsThePythonClientReadsIt) {
  metrics::Registry r;
  r.GetCounter("tandem_requests_total", "Requests.", {{"endpoint", "/v1/chat/completions"}, {"status", "200"}}).Inc(41);
  r.GetCounter("tandem_requests_total", "Requests.", {{"endpoint", "/v1/completions"}, {"status", "499"}}).Inc(2);
  r.GetCounter("tandem_odd_total", "Label escapes.", {{"path", "a\"b\\c\nd"}}).Inc(0.5);
  r.GetGauge("tandem_prompt_tokens_before_first_token", "Backlog.").Set(1234567);
  r.GetGauge("tandem_negative", "A negative gauge.").Set(-3.25e-7);
  auto& h = r.GetHistogram("tandem_time_to_first_token_seconds", "TTFT.", {0.01, 0.1, 1.0});
  for (double v : {0.005, 0.05, 0.5, 5.0, 0.05}) h.Observe(v);
  ExpectSameAsPython(r.RenderText());
}

TEST(PromText, HandWrittenTextWithTimestampsCommentsAndNonFiniteValues) {
  ExpectSameAsPython(
      "# a comment\n"
      "# HELP x_total Some help with \\\\ and \\n escapes.\n"
      "# TYPE x_total counter\n"
      "x_total 7 1700000000000\n"
      "\n"
      "y{a=\"1\",b=\"two words\"} +Inf\n"
      "y{a=\"2\",b=\"\"} -Inf\n"
      "z NaN\n"
      "w{le=\"0.5\",} 3.5e3\n"
      "   v 0.125\n"
      "u{x=\"\\\\\\\"\\n\"} 1e-3\n");
}

TEST(PromText, LinesThePythonClientRefusesAreErrorsHere) {
  for (const std::string bad : {"x{a=\"1\" 2\n", "x{a=\"1\"} two\n", "9x 1\n", "x{a=1} 2\n", "x\n",
                                "x{a=\"unterminated} 1\n"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(PythonParse(bad).has_value()) << "the reference accepts it: the case proves nothing";
    auto ours = ParsePromText(bad);
    EXPECT_FALSE(ours.ok());
    if (!ours.ok()) {
      EXPECT_NE(ours.status().message().find("line 1"), std::string::npos) << ours.status().message();
    }
  }
}

TEST(PromText, SumSamplesMatchesLabelSubsets) {
  auto s = ParsePromText("r{e=\"a\",s=\"200\"} 3\nr{e=\"b\",s=\"200\"} 4\nr{e=\"a\",s=\"500\"} 5\nq 1\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(SumSamples(*s, "r"), 12);
  EXPECT_EQ(SumSamples(*s, "r", {{"s", "200"}}), 7);
  EXPECT_EQ(SumSamples(*s, "r", {{"e", "a"}, {"s", "500"}}), 5);
  EXPECT_EQ(SumSamples(*s, "missing"), 0);
}

}  // namespace
}  // namespace tandem::planner
