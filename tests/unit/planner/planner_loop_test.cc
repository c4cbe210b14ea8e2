// The planner loop (planner/planner_loop.h) and its meter (planner/load_meter.h): the interval's
// load computed by hand from two readings of the frontend's counters, counter resets, an interval
// without finished requests; the loop wired to a fake connector: the decision of a ReplicaPlanner
// fed the hand-computed sample is what gets applied, a failed scrape holds, a manual edit becomes
// a bound, and the planner's metrics.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "common/metrics.h"
#include "planner/load_meter.h"
#include "planner/planner_loop.h"
#include "planner/prom_text.h"
#include "planner_test_util.h"

namespace tandem::planner {
namespace {


// The frontend's /metrics text for these counter values (the names of frontend/openai_metrics.h).
std::string FrontendText(double requests, double finished, double prompt, double generated,
                         double queries, double hits, double backlog) {
  return fmt::format(
      "# TYPE tandem_generation_requests_total counter\ntandem_generation_requests_total {}\n"
      "tandem_request_duration_seconds_bucket{{le=\"+Inf\"}} {}\ntandem_request_duration_seconds_count {}\n"
      "tandem_prompt_tokens_total {}\ntandem_generation_tokens_total {}\n"
      "tandem_prefix_cache_queries_total {}\ntandem_prefix_cache_hits_total {}\n"
      "tandem_prompt_tokens_before_first_token {}\n"
      "tandem_requests_total{{endpoint=\"/v1/chat/completions\",status=\"200\"}} {}\n",
      requests, finished, finished, prompt, generated, queries, hits, backlog, finished);
}

FrontendReading Reading(double t, const std::string& text) {
  auto s = ParsePromText(text);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  auto r = ReadFrontend(*s, t);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return *r;
}

TEST(LoadMeter, AnIntervalFromTwoReadings) {
  const FrontendReading a = Reading(100, FrontendText(10, 8, 8000, 800, 8000, 2000, 0));
  const FrontendReading b = Reading(130, FrontendText(70, 58, 108000, 13300, 108000, 52000, 4096));
  const LoadSample s = MeterInterval(a, b, nullptr);
  EXPECT_TRUE(s.valid);
  EXPECT_DOUBLE_EQ(s.time_s, 130);
  EXPECT_DOUBLE_EQ(s.request_rate, 60.0 / 30);          // 60 arrivals in 30 s
  EXPECT_DOUBLE_EQ(s.mean_prompt_tokens, 100000.0 / 50);  // 50 finished
  EXPECT_DOUBLE_EQ(s.mean_output_tokens, 12500.0 / 50);
  EXPECT_DOUBLE_EQ(s.prefix_hit_rate, 50000.0 / 100000);
  EXPECT_DOUBLE_EQ(s.queued_prefill_tokens, 4096);
  EXPECT_DOUBLE_EQ(s.requests_in_flight, 0);  // no engine gauges in this text
}

TEST(LoadMeter, RequestsInFlightAreTheEngineGaugesNow) {
  const std::string gauges = "tandem_num_requests_running 12\ntandem_num_requests_waiting 130\n";
  const FrontendReading a = Reading(0, FrontendText(10, 8, 8000, 800, 8000, 0, 0));
  const FrontendReading b = Reading(10, FrontendText(10, 8, 8000, 800, 8000, 0, 0) + gauges);
  EXPECT_DOUBLE_EQ(MeterInterval(a, b, nullptr).requests_in_flight, 142);  // a lull: rate 0
  EXPECT_DOUBLE_EQ(MeterInterval(a, b, nullptr).request_rate, 0);
}

TEST(LoadMeter, ObservedTtftAndItlAreTheHistogramsMeansOverTheInterval) {
  auto hist = [](double ttft_sum, double ttft_n, double itl_sum, double itl_n) {
    return fmt::format(
        "# TYPE tandem_time_to_first_token_seconds histogram\n"
        "tandem_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {1}\n"
        "tandem_time_to_first_token_seconds_sum {0}\ntandem_time_to_first_token_seconds_count {1}\n"
        "# TYPE tandem_inter_token_latency_seconds histogram\n"
        "tandem_inter_token_latency_seconds_bucket{{le=\"+Inf\"}} {3}\n"
        "tandem_inter_token_latency_seconds_sum {2}\ntandem_inter_token_latency_seconds_count {3}\n"
        "tandem_num_requests_running 7\ntandem_num_requests_waiting 3\n",
        ttft_sum, ttft_n, itl_sum, itl_n);
  };
  const FrontendReading a = Reading(0, FrontendText(10, 8, 8000, 800, 8000, 0, 0) + hist(4, 10, 2, 100));
  const FrontendReading b = Reading(10, FrontendText(30, 28, 28000, 2800, 28000, 0, 0) + hist(10, 30, 8, 400));
  const LoadSample s = MeterInterval(a, b, nullptr);
  EXPECT_DOUBLE_EQ(s.observed_ttft_ms, 1000 * 6.0 / 20);  // 20 first tokens, 6 s in all: 300 ms
  EXPECT_DOUBLE_EQ(s.ttft_count, 20);
  EXPECT_DOUBLE_EQ(s.observed_itl_ms, 1000 * 6.0 / 300);  // 20 ms
  EXPECT_DOUBLE_EQ(s.itl_count, 300);
  EXPECT_DOUBLE_EQ(s.first_token_rate, 20.0 / 10);
  EXPECT_DOUBLE_EQ(s.mean_decoding, 6.0 / 10);  // 6 s of gaps in 10 s: 0.6 requests decoding on average
  EXPECT_DOUBLE_EQ(s.requests_in_flight, 10);
  const FrontendReading c = Reading(20, FrontendText(30, 28, 28000, 2800, 28000, 0, 0) + hist(10, 30, 8, 400));
  const LoadSample quiet = MeterInterval(b, c, &s);
  EXPECT_EQ(quiet.ttft_count, 0);  // no first token in the interval: nothing observed
  EXPECT_EQ(quiet.observed_ttft_ms, 0);
  EXPECT_EQ(quiet.observed_itl_ms, 0);
  // A restarted frontend: its ITL count is above the old one but its sum below; both count from 0.
  const FrontendReading r = Reading(30, FrontendText(5, 5, 500, 50, 500, 0, 0) + hist(1, 5, 0.5, 500));
  const LoadSample after = MeterInterval(c, r, &quiet);
  EXPECT_DOUBLE_EQ(after.itl_count, 500);
  EXPECT_DOUBLE_EQ(after.observed_itl_ms, 1000 * 0.5 / 500);  // 1 ms, not a mix of before and after
  EXPECT_DOUBLE_EQ(after.ttft_count, 5);
  EXPECT_DOUBLE_EQ(after.observed_ttft_ms, 1000 * 1.0 / 5);
}

TEST(LoadMeter, AResetCountsFromZeroAndAQuietIntervalKeepsTheMeans) {
  const FrontendReading a = Reading(0, FrontendText(500, 500, 1e6, 1e5, 1e6, 0, 0));
  const FrontendReading b = Reading(10, FrontendText(20, 10, 5000, 700, 5000, 1000, 0));  // restarted
  const LoadSample s = MeterInterval(a, b, nullptr);
  EXPECT_DOUBLE_EQ(s.request_rate, 2.0);
  EXPECT_DOUBLE_EQ(s.mean_prompt_tokens, 500);
  EXPECT_DOUBLE_EQ(s.mean_output_tokens, 70);
  EXPECT_DOUBLE_EQ(s.prefix_hit_rate, 0.2);
  const FrontendReading c = Reading(20, FrontendText(23, 10, 5000, 700, 5000, 1000, 300));  // none finished
  const LoadSample q = MeterInterval(b, c, &s);
  EXPECT_DOUBLE_EQ(q.request_rate, 0.3);
  EXPECT_DOUBLE_EQ(q.mean_prompt_tokens, 500);
  EXPECT_DOUBLE_EQ(q.mean_output_tokens, 70);
  EXPECT_DOUBLE_EQ(q.prefix_hit_rate, 0.2);
  EXPECT_FALSE(MeterInterval(c, c, &q).valid);  // no time passed
}

TEST(LoadMeter, AFrontendWithoutThePlannersMetricsIsNamed) {
  auto s = ParsePromText("tandem_prompt_tokens_total 5\n");
  ASSERT_TRUE(s.ok());
  auto r = ReadFrontend(*s, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("tandem_generation_requests_total"), std::string::npos);
}

class FakeConnector : public ScaleConnector {
 public:
  std::string name() const override { return "fake"; }
  Result<RoleCounts> Current() override { return counts; }
  Status Apply(const RoleCounts& want) override {
    applied.push_back(want);
    counts = want;
    return Status::Ok();
  }
  RoleCounts counts{1, 1};
  std::vector<RoleCounts> applied;
};

TEST(PlannerLoop, AppliesWhatThePlannerDecidesForTheMeteredInterval) {
  FakeConnector conn;
  std::string text = FrontendText(0, 0, 0, 0, 0, 0, 0);
  bool fail = false;
  PlannerLoopOptions o;
  o.interval_s = 30;
  o.scrape = [&]() -> Result<std::string> {
    if (fail) return Status(StatusCode::kFailedPrecondition, "connection refused");
    return text;
  };
  metrics::Registry registry;
  auto planner = ReplicaPlanner::Create(Config(), TestProfile());
  ASSERT_TRUE(planner.ok());
  PlannerLoop loop(std::move(*planner), &conn, o, &registry);
  EXPECT_FALSE(loop.Step(0).has_value());  // the baseline
  EXPECT_TRUE(conn.applied.empty());

  // 30 s: 360 arrivals (12/s), 360 finished, 2048-token prompts, 256-token outputs, no hits.
  text = FrontendText(360, 360, 360 * 2048, 360 * 256, 360 * 2048, 0, 0);
  auto d = loop.Step(30);
  ASSERT_TRUE(d.has_value());
  auto reference = ReplicaPlanner::Create(Config(), TestProfile());
  ASSERT_TRUE(reference.ok());
  const ReplicaDecision want = reference->Plan(LoadSample{true, 30, 12.0, 2048, 256, 0, 0}, 30, 1, 1);
  EXPECT_EQ(d->prefill, want.prefill);
  EXPECT_EQ(d->decode, want.decode);
  EXPECT_GT(want.prefill + want.decode, 2) << "the case must scale up to test anything";
  ASSERT_EQ(conn.applied.size(), 1u);
  EXPECT_EQ(conn.applied[0], (RoleCounts{want.prefill, want.decode}));
  const std::string metrics_text = registry.RenderText();
  auto samples = ParsePromText(metrics_text);
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ(SumSamples(*samples, "tandem_planner_desired_replicas", {{"role", "prefill"}}), want.prefill);
  EXPECT_EQ(SumSamples(*samples, "tandem_planner_current_replicas", {{"role", "decode"}}), 1);
  EXPECT_DOUBLE_EQ(SumSamples(*samples, "tandem_planner_request_rate"), 12.0);
  EXPECT_EQ(SumSamples(*samples, "tandem_planner_decisions_total", {{"outcome", "scaled"}}), 1);

  // A failed scrape holds the decision: nothing applied, an error counted.
  fail = true;
  d = loop.Step(60);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->held);
  EXPECT_EQ(conn.applied.size(), 1u);
  samples = ParsePromText(registry.RenderText());
  EXPECT_EQ(SumSamples(*samples, "tandem_planner_errors_total", {{"source", "metrics"}}), 1);
  EXPECT_EQ(SumSamples(*samples, "tandem_planner_decisions_total", {{"outcome", "held"}}), 1);
}

TEST(PlannerLoop, AManualEditBecomesABoundInsteadOfBeingFought) {
  FakeConnector conn;
  std::string text = FrontendText(0, 0, 0, 0, 0, 0, 0);
  PlannerLoopOptions o;
  o.scrape = [&]() -> Result<std::string> { return text; };
  auto planner = ReplicaPlanner::Create(Config(), TestProfile());
  ASSERT_TRUE(planner.ok());
  PlannerLoop loop(std::move(*planner), &conn, o, nullptr);
  loop.Step(0);
  // A quiet interval: the planner keeps 1 and 1.
  text = FrontendText(3, 3, 3 * 512, 3 * 16, 3 * 512, 0, 0);
  auto d = loop.Step(30);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->prefill, 1);
  EXPECT_EQ(d->decode, 1);
  // Someone scales prefill to 4 by hand; the same quiet load would say 1: 4 is now the minimum.
  conn.counts.prefill = 4;
  text = FrontendText(6, 6, 6 * 512, 6 * 16, 6 * 512, 0, 0);
  for (double t : {60.0, 90.0, 120.0, 150.0, 180.0}) {
    d = loop.Step(t);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->prefill, 4) << t;
    text = FrontendText(6 + t / 10, 6 + t / 10, (6 + t / 10) * 512, (6 + t / 10) * 16, (6 + t / 10) * 512, 0, 0);
  }
  for (const RoleCounts& a : conn.applied) EXPECT_GE(a.prefill, 4);
}

}  // namespace
}  // namespace tandem::planner
