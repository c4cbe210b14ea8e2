// The SLA planner's core (planner/): profile lookups, the predictors, and the replica formula
// against cases computed by hand from the formulas in replica_planner.h; hysteresis, cool-down,
// bounds, the budget, and stale or missing metrics.
#include <gtest/gtest.h>

#include "planner/predictor.h"
#include "planner/profile.h"
#include "planner/replica_planner.h"
#include "planner_test_util.h"

namespace tandem::planner {
namespace {


LoadSample Sample(double t, double rate, double prompt = 2048, double output = 256, double hit = 0,
                  double queued = 0) {
  return LoadSample{true, t, rate, prompt, output, hit, queued};
}

TEST(PlannerProfile, InterpolatesAndRefusesBadInput) {
  const Profile p = TestProfile();
  EXPECT_DOUBLE_EQ(p.PrefillMs(1024), 50 + 512.0 / 1536 * 150);  // 100 ms
  EXPECT_DOUBLE_EQ(p.PrefillMs(4096), 200 + 2048.0 / 1536 * 150);
  EXPECT_DOUBLE_EQ(p.ItlMs(2048, 40), 20 + 24.0 / 48 * 40);  // 40 ms
  EXPECT_DOUBLE_EQ(p.MaxBatch(2048, 30), 16 + 10.0 / 40 * 48);  // 28
  EXPECT_EQ(p.MaxBatch(2048, 5), 0);
  EXPECT_EQ(p.MaxBatch(2048, 100), 64);
  auto back = ProfileFromJson(ToJson(p));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->prefill.size(), 2u);
  for (const char* bad : {R"({"prefill":[],"decode":[]})", R"({"decode":[]})",
                          R"({"prefill":[{"prompt_tokens":1,"ttft_ms":-1}],"decode":[{"context":1,"batch":1,"itl_ms":1}]})",
                          R"({"prefill":[{"prompt_tokens":5,"ttft_ms":1},{"prompt_tokens":5,"ttft_ms":2}],
                              "decode":[{"context":1,"batch":1,"itl_ms":1}]})"}) {
    EXPECT_FALSE(ProfileFromJson(nlohmann::json::parse(bad)).ok()) << bad;
  }
}

TEST(PlannerPredictor, ConstantEwmaAndLinearTrend) {
  LoadPredictor c(PredictorKind::kConstant), e(PredictorKind::kEwma, 0.5), l(PredictorKind::kLinearTrend, 0.5, 4);
  EXPECT_EQ(c.Predict(), 0);
  for (double v : {1.0, 2.0, 3.0, 4.0}) {
    c.Observe(v);
    e.Observe(v);
    l.Observe(v);
  }
  EXPECT_DOUBLE_EQ(c.Predict(), 4);
  EXPECT_DOUBLE_EQ(e.Predict(), ((1 * 0.5 + 2 * 0.5) * 0.5 + 3 * 0.5) * 0.5 + 4 * 0.5);  // 3.125
  EXPECT_NEAR(l.Predict(), 5, 1e-9);
  LoadPredictor down(PredictorKind::kLinearTrend, 0.5, 3);
  for (double v : {4.0, 2.0, 0.0}) down.Observe(v);
  EXPECT_EQ(down.Predict(), 0);  // never below 0
  EXPECT_FALSE(ParsePredictorKind("arima").ok());
  EXPECT_EQ(*ParsePredictorKind("linear-trend"), PredictorKind::kLinearTrend);
}

TEST(PlannerFormula, MatchesHandComputedCases) {
  auto planner = ReplicaPlanner::Create(Config(), TestProfile());
  ASSERT_TRUE(planner.ok());
  std::string why;
  // 4 req/s of 2048 uncached tokens: s = 0.2 s, rho_max = 1.6 / 1.8, 4 x 0.2 / 0.889 = 0.9 -> 1.
  EXPECT_EQ(planner->PrefillReplicas(4, 2048, 0, &why), 1);
  // 10 req/s: 2.25 -> 3; 13 req/s: 2.925; a backlog of q prompts adds q x 0.2 / 30.
  EXPECT_EQ(planner->PrefillReplicas(10, 2048, 0, &why), 3);
  EXPECT_EQ(planner->PrefillReplicas(13, 2048, 0, &why), 3);  // 2.925
  EXPECT_EQ(planner->PrefillReplicas(13, 2048, 20480, &why), 3);  // 2.925 + 10 x 0.2 / 30 = 2.99
  EXPECT_EQ(planner->PrefillReplicas(13, 2048, 40960, &why), 4);  // 2.925 + 20 x 0.2 / 30 = 3.06
  // A 75% prefix hit: 512 uncached tokens, s = 0.05, rho_max = 1.9 / 1.95: 10 req/s -> 0.51 -> 1.
  EXPECT_EQ(planner->PrefillReplicas(10, 512, 0, &why), 1);
  // Decode: 28 per worker at ITL 30 ms (ItlMs(2048, 28) = 30): 4 x 256 x 0.03 = 30.72 at once -> 2;
  // 10 req/s -> 3.
  EXPECT_EQ(planner->DecodeReplicas(4, 2048, 256, &why), 2);
  EXPECT_EQ(planner->DecodeReplicas(10, 2048, 256, &why), 3);
  EXPECT_EQ(planner->DecodeReplicas(0, 2048, 256, &why), 0);
  // A lull after a burst: no arrivals, but 70 requests still in the system need 70 / 28 = 2.5 -> 3
  // workers; with 4 req/s the larger of 30.72 and 20 in flight counts.
  EXPECT_EQ(planner->DecodeReplicas(0, 2048, 256, &why, 70), 3);
  EXPECT_EQ(planner->DecodeReplicas(4, 2048, 256, &why, 20), 2);
  // An ITL target above every profiled point: 64 per worker at their 60 ms: 10 x 256 x 0.06 / 64
  // = 2.4 -> 3 (at the target's 100 ms it would have been 4).
  PlannerConfig loose = Config();
  loose.itl_ms = 100;
  EXPECT_EQ(ReplicaPlanner::Create(loose, TestProfile())->DecodeReplicas(10, 2048, 256, &why), 3);
  // A TTFT target below one prefill's time: run each worker at 5%.
  PlannerConfig tight = Config();
  tight.ttft_ms = 100;
  auto t = ReplicaPlanner::Create(tight, TestProfile());
  why.clear();
  EXPECT_EQ(t->PrefillReplicas(1, 2048, 0, &why), 4);  // 1 x 0.2 / 0.05
  EXPECT_NE(why.find("below one prefill"), std::string::npos) << why;
}

TEST(PlannerDecisions, ScaleUpAtOnceDownAfterHysteresisAndCooldown) {
  auto planner = ReplicaPlanner::Create(Config(), TestProfile());
  ASSERT_TRUE(planner.ok());
  // A burst: from 1 + 1 up to 3 + 3 at once.
  ReplicaDecision d = planner->Plan(Sample(0, 10), 0, 1, 1);
  EXPECT_EQ(d.prefill, 3);
  EXPECT_EQ(d.decode, 3);
  EXPECT_FALSE(d.held);
  // A lull: one interval asking for 1 + 1 holds (hysteresis), the second is inside the cool-down
  // (60 s after the change at 0), the third scales down.
  d = planner->Plan(Sample(30, 1), 30, 3, 3);
  EXPECT_EQ(d.prefill, 3);
  EXPECT_NE(d.reason.find("held"), std::string::npos) << d.reason;
  d = planner->Plan(Sample(45, 1), 45, 3, 3);
  EXPECT_EQ(d.prefill, 3);
  d = planner->Plan(Sample(60, 1), 60, 3, 3);
  EXPECT_EQ(d.prefill, 1);
  EXPECT_EQ(d.decode, 1);
  // A noisy rate between two levels: never down while one of the last asks is at the current.
  d = planner->Plan(Sample(200, 10), 200, 1, 1);
  EXPECT_EQ(d.prefill, 3);
  d = planner->Plan(Sample(300, 1), 300, 3, 3);
  d = planner->Plan(Sample(330, 10), 330, 3, 3);
  d = planner->Plan(Sample(360, 1), 360, 3, 3);
  EXPECT_EQ(d.prefill, 3);
}

TEST(PlannerDecisions, BoundsAndBudget) {
  PlannerConfig c = Config();
  c.max_prefill = 2;
  c.min_decode = 2;
  auto bounded = ReplicaPlanner::Create(c, TestProfile());
  ReplicaDecision d = bounded->Plan(Sample(0, 10), 0, 1, 1);
  EXPECT_EQ(d.prefill, 2);  // 3 wanted, at most 2
  d = bounded->Plan(Sample(30, 0), 30, 2, 2);
  EXPECT_GE(d.decode, 2);
  c = Config();
  c.budget = 4;
  auto budget = ReplicaPlanner::Create(c, TestProfile());
  d = budget->Plan(Sample(0, 10), 0, 1, 1);  // 3 + 3 wanted; 4 workers: 2 + 2
  EXPECT_EQ(d.prefill, 2);
  EXPECT_EQ(d.decode, 2);
  EXPECT_NE(d.reason.find("budget"), std::string::npos);
  // The budget holds even against a scale-down hold: running 3 + 3 under a budget of 4.
  d = budget->Plan(Sample(30, 10), 30, 3, 3);
  EXPECT_LE(d.prefill + d.decode, 4);
  c.budget = 1;  // below the minima
  EXPECT_FALSE(ReplicaPlanner::Create(c, TestProfile()).ok());
  c = Config();
  c.min_prefill = 3;
  c.max_prefill = 2;
  EXPECT_FALSE(ReplicaPlanner::Create(c, TestProfile()).ok());
}

TEST(PlannerDecisions, StaleOrMissingMetricsHoldTheLastDecision) {
  auto planner = ReplicaPlanner::Create(Config(), TestProfile());
  ReplicaDecision d = planner->Plan(Sample(0, 10), 0, 1, 1);
  ASSERT_EQ(d.prefill, 3);
  LoadSample missing;
  d = planner->Plan(missing, 30, 3, 3);
  EXPECT_TRUE(d.held);
  EXPECT_EQ(d.prefill, 3);
  EXPECT_NE(d.reason.find("missing"), std::string::npos);
  d = planner->Plan(Sample(30, 0), 200, 3, 3);  // read 170 s ago, more than two intervals
  EXPECT_TRUE(d.held);
  EXPECT_EQ(d.decode, 3);
  EXPECT_NE(d.reason.find("old"), std::string::npos) << d.reason;
  // Before any decision: the counts running now.
  auto fresh = ReplicaPlanner::Create(Config(), TestProfile());
  d = fresh->Plan(missing, 0, 2, 5);
  EXPECT_TRUE(d.held);
  EXPECT_EQ(d.prefill, 2);
  EXPECT_EQ(d.decode, 5);
}

}  // namespace
}  // namespace tandem::planner
