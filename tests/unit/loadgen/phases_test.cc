// tandem bench --phases (loadgen/phases.h, timeline.h): the phase spec, the phased workload's
// arrivals, per-phase goodput at an SLO, scale events from scraped series, scraping Prometheus
// text, and the timeline charts as XML (python3's xml.etree parses them).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "loadgen/phases.h"
#include "loadgen/runner.h"
#include "loadgen/timeline.h"
#include "tokenizer/tokenizer.h"

namespace tandem::bench {
namespace {

TEST(PhasesTest, ParsesPhasesWithTheirStartTimes) {
  auto p = ParsePhases(" long:input=1024,output=8,rate=4.5,duration=60 ;"
                       "gen:input=uniform:16:48,output=256,rate=0.8,duration=90;lull:input=64,"
                       "output=16,rate=0.1,duration=45;");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0].name, "long");
  EXPECT_EQ((*p)[0].input_len.Mean(), 1024);
  EXPECT_EQ((*p)[0].output_len.Mean(), 8);
  EXPECT_DOUBLE_EQ((*p)[0].rate, 4.5);
  EXPECT_DOUBLE_EQ((*p)[0].start_s, 0);
  EXPECT_EQ((*p)[1].input_len.kind, LengthDist::Kind::kUniform);
  EXPECT_DOUBLE_EQ((*p)[1].start_s, 60);
  EXPECT_DOUBLE_EQ((*p)[2].start_s, 150);
  EXPECT_EQ(PhasesToString(*p),
            "long:input=1024,output=8,rate=4.5,duration=60;gen:input=uniform:16:48,output=256,rate=0.8,"
            "duration=90;lull:input=64,output=16,rate=0.1,duration=45");
  auto again = ParsePhases(PhasesToString(*p));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(PhasesToString(*again), PhasesToString(*p));
}

TEST(PhasesTest, RefusesMalformedSpecsNamingThePhaseAndKey) {
  struct Case {
    const char* spec;
    const char* says;
  } cases[] = {
      {"", "no phase"},
      {"a", "NAME:key=value"},
      {"a:input=8,output=8,rate=1", "duration missing"},
      {"a:input=8,output=8,rate=0,duration=1", "rate must be"},
      {"a:input=8,output=8,rate=1,duration=-3", "duration must be"},
      {"a:input=8,output=8,rate=x,duration=1", "rate must be"},
      {"a:input=0,output=8,rate=1,duration=1", "input"},
      {"a:input=8,output=8,rate=1,duration=1,burst=2", "unknown key 'burst'"},
      {"a:input=8,input=9,output=8,rate=1,duration=1", "input given twice"},
      {"a:input=8,output=8,rate=1,duration=1;a:input=8,output=8,rate=1,duration=1", "'a' given twice"},
      {"a b:input=8,output=8,rate=1,duration=1", "phase name"},
      {"a:input8,output=8,rate=1,duration=1", "not key=value"},
  };
  for (const Case& c : cases) {
    auto p = ParsePhases(c.spec);
    ASSERT_FALSE(p.ok()) << c.spec;
    EXPECT_NE(p.status().message().find(c.says), std::string::npos) << c.spec << ": " << p.status().message();
  }
}

std::shared_ptr<const PromptVocab> Vocab() {
  static auto vocab = [] {
    auto tok = Tokenizer::Load(DefaultModelDir());
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    auto v = PromptVocab::FromTokenizer(**tok);
    EXPECT_TRUE(v.ok());
    return *v;
  }();
  return vocab;
}

TEST(PhasesTest, WorkloadArrivesWithinEachPhaseAtItsRateWithItsLengths) {
  auto phases = ParsePhases("a:input=40,output=3,rate=20,duration=50;b:input=7,output=90,rate=2,duration=100");
  ASSERT_TRUE(phases.ok());
  auto w = MakePhasedWorkload(*phases, Vocab(), 7);
  EXPECT_TRUE(w->has_timestamps());
  EXPECT_TRUE(w->timestamps_from_zero());
  int n[2] = {0, 0};
  double last = -1;
  uint64_t id = 0;
  while (auto item = w->Next()) {
    ASSERT_GE(item->phase, 0);
    ASSERT_LE(item->phase, 1);
    const PhaseSpec& p = (*phases)[item->phase];
    EXPECT_GE(item->timestamp_s, p.start_s);
    EXPECT_LT(item->timestamp_s, p.start_s + p.duration_s);
    EXPECT_GE(item->timestamp_s, last);  // in time order
    last = item->timestamp_s;
    EXPECT_EQ(item->id, id++);
    ASSERT_EQ(item->turns.size(), 1u);
    EXPECT_EQ(item->turns[0].input_tokens, item->phase == 0 ? 40 : 7);
    EXPECT_EQ(item->turns[0].output_tokens, item->phase == 0 ? 3 : 90);
    ++n[item->phase];
  }
  // Poisson counts: 1000 +- 4 sigma (~126), 200 +- 4 sigma (~57).
  EXPECT_NEAR(n[0], 1000, 126);
  EXPECT_NEAR(n[1], 200, 57);
  // Seeded: the same seed gives the same arrivals.
  auto w2 = MakePhasedWorkload(*phases, Vocab(), 7);
  auto first = w2->Next();
  auto again = MakePhasedWorkload(*phases, Vocab(), 7)->Next();
  EXPECT_EQ(first->timestamp_s, again->timestamp_s);
  EXPECT_EQ(first->turns[0].text, again->turns[0].text);
}

RequestRecord Req(int phase, double start, double ttft, std::vector<double> chunks, bool ok = true) {
  RequestRecord r;
  r.phase = phase;
  r.start_s = start;
  r.ttft_s = ttft;
  r.chunk_times_s = std::move(chunks);
  r.e2e_s = r.chunk_times_s.empty() ? 1 : r.chunk_times_s.back();
  r.completion_tokens = r.num_chunks();
  if (!ok) {
    r.error = ErrorKind::kHttpStatus;
    r.http_status = 503;
  }
  return r;
}

TEST(PhasesTest, SummarizesGoodputAtTheSloPerPhaseAndScaleEvents) {
  auto phases = ParsePhases("p:input=8,output=3,rate=1,duration=10;q:input=8,output=3,rate=2,duration=20");
  ASSERT_TRUE(phases.ok());
  RunResult run;
  // Phase p: 4 requests; met: #0 (ttft 0.1, itl 0.05); #1 misses TTFT; #2 misses ITL (mean 0.2);
  // #3 failed. Phase q: 2 requests, both met.
  run.records = {Req(0, 0.5, 0.1, {0.1, 0.15, 0.2}), Req(0, 2, 0.9, {0.9, 0.95, 1.0}),
                 Req(0, 3, 0.1, {0.1, 0.3, 0.5}), Req(0, 4, -1, {}, false),
                 Req(1, 12, 0.2, {0.2, 0.25, 0.3}), Req(1, 29, 0.3, {0.3, 0.31, 0.32})};
  const std::string pre = "tandem_planner_desired_replicas{role=prefill}";
  const std::string dec = "tandem_planner_desired_replicas{role=decode}";
  auto sample = [&](double t, double p, double d) { return ScrapeSample{t, {{pre, p}, {dec, d}}}; };
  run.scrapes = {sample(0, 1, 1), sample(5, 2, 1), sample(9, 2, 1), sample(15, 1, 2), sample(31, 1, 1)};
  auto slo = ParseSlo("ttft=500ms,itl=100ms");
  ASSERT_TRUE(slo.ok());
  auto s = SummarizePhases(run, *phases, *slo, {pre, dec});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].run.num_requests, 4);
  EXPECT_EQ(s[0].run.num_ok, 3);
  EXPECT_EQ(s[0].run.num_errors, 1);
  EXPECT_EQ(s[0].run.num_slo_met, 1);
  EXPECT_DOUBLE_EQ(s[0].slo_met_pct, 25);
  EXPECT_DOUBLE_EQ(s[0].run.goodput, 0.1);  // 1 met / 10 s
  EXPECT_DOUBLE_EQ(s[1].slo_met_pct, 100);
  EXPECT_DOUBLE_EQ(s[1].run.goodput, 0.1);  // 2 met / 20 s
  EXPECT_EQ(s[0].range.at(pre), std::make_pair(1.0, 2.0));
  EXPECT_EQ(s[0].range.at(dec), std::make_pair(1.0, 1.0));
  // The last phase runs on until the run ends: the 31 s sample is in q.
  EXPECT_EQ(s[1].range.at(dec), std::make_pair(1.0, 2.0));
  ASSERT_EQ(s[0].events.size(), 1u);
  EXPECT_DOUBLE_EQ(s[0].events[0].t_s, 5);
  EXPECT_EQ(s[0].events[0].key, pre);
  ASSERT_EQ(s[1].events.size(), 3u);  // 15 s: prefill 2 -> 1, decode 1 -> 2; 31 s: decode 2 -> 1
  EXPECT_DOUBLE_EQ(s[1].events[2].t_s, 31);
  EXPECT_EQ(s[1].events[2].to, 1);
  const std::string table = FormatPhaseTable(s, {pre, dec});
  EXPECT_NE(table.find("| p | 0 | 1 | 8 / 3 | 3 | 1 | 25.0 |"), std::string::npos) << table;
  EXPECT_NE(table.find("desired prefill"), std::string::npos) << table;
  EXPECT_NE(table.find("scale event: 15.0 s (q + 5.0 s): desired decode 1 -> 2"), std::string::npos) << table;
  EXPECT_NE(table.find("failed in p: 1 x http_503"), std::string::npos) << table;
  EXPECT_EQ(SeriesLabel(dec), "desired decode");
  EXPECT_EQ(SeriesLabel("other_metric"), "other_metric");
}

TEST(PhasesTest, ScrapeValuesKeepsThePrefixedSamplesKeyedByLabels) {
  auto v = ScrapeValues(
      "# TYPE tandem_planner_desired_replicas gauge\n"
      "tandem_planner_desired_replicas{role=\"prefill\"} 2\n"
      "tandem_planner_desired_replicas{role=\"decode\"} 1\n"
      "tandem_planner_request_rate 4.5\n"
      "tandem_requests_total{code=\"200\",model=\"m\"} 9\n",
      "tandem_planner_");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->size(), 3u);
  EXPECT_EQ(v->at("tandem_planner_desired_replicas{role=prefill}"), 2);
  EXPECT_EQ(v->at("tandem_planner_request_rate"), 4.5);
  auto all = ScrapeValues("m{b=\"1\",a=\"2\"} 3\n", "");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->at("m{a=2,b=1}"), 3);  // labels in name order
  EXPECT_FALSE(ScrapeValues("not a sample line at all {\n", "").ok());
}

// python3's XML parser: exit 0 and the root tag when the file is well-formed.
std::string ParseWithPython(const std::string& path) {
  const std::string cmd = "/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; "
                          "print(E.parse(sys.argv[1]).getroot().tag)\" '" + path + "' 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return "popen failed";
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  const int rc = pclose(f);
  return rc == 0 ? out : "rc " + std::to_string(rc) + ": " + out;
}

TEST(PhasesTest, TimelineChartsAreWellFormedSvg) {
  auto phases = ParsePhases("a<&\"b:input=8,output=3,rate=1,duration=10;q:input=8,output=3,rate=2,duration=20");
  ASSERT_FALSE(phases.ok());  // names are plain
  phases = ParsePhases("p:input=8,output=3,rate=1,duration=10;q:input=8,output=3,rate=2,duration=20");
  ASSERT_TRUE(phases.ok());
  RunResult run;
  run.config.scrape_interval_s = 1;
  run.records = {Req(0, 0.5, 0.1, {0.1, 0.15, 0.2}), Req(0, 4, -1, {}, false), Req(1, 12, 0.2, {0.2, 0.25, 0.3})};
  const std::string key = "tandem_planner_desired_replicas{role=\"pre<&>fill\"}";  // escaped in the SVG
  run.scrapes = {{0, {{key, 1}}}, {5, {{key, 2}}}, {25, {{key, 1}}}};
  auto slo = ParseSlo("ttft=500ms,itl=100ms");
  ASSERT_TRUE(slo.ok());
  const auto dir = std::filesystem::temp_directory_path() / ("tandem-timeline-" + std::to_string(getpid()));
  auto files = WriteTimelineCharts(dir.string(), run, *phases, *slo, {key});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 3u);
  for (const std::string& f : *files) {
    const std::string root = ParseWithPython(f);
    EXPECT_NE(root.find("{http://www.w3.org/2000/svg}svg"), std::string::npos) << f << ": " << root;
  }
  // Empty: no requests, no scrapes: still two well-formed charts saying so.
  auto empty = WriteTimelineCharts((dir / "empty").string(), RunResult{}, *phases, Slo{}, {key});
  ASSERT_TRUE(empty.ok());
  ASSERT_EQ(empty->size(), 2u);
  for (const std::string& f : *empty) EXPECT_NE(ParseWithPython(f).find("svg"), std::string::npos) << f;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem::bench
