// The profile's online refinement (planner/correction.h): the M/D/1 service time behind an observed
// TTFT, the prefill and decode factors against cases computed by hand from the formulas there (the
// test profile of planner_test_util.h), their smoothing, bounds and sample minimum, and how the
// factors change ReplicaPlanner's counts.
#include <gtest/gtest.h>

#include <cmath>

#include "planner/correction.h"
#include "planner/replica_planner.h"
#include "planner_test_util.h"

namespace tandem::planner {
namespace {

// One interval's observations: `rate` first tokens/s, TTFT and ITL means (0: none that interval),
// requests decoding (time average), the workers of each role; prompts of `prompt` uncached tokens, context 2048.
ObservedLatency Observed(double rate, double ttft_ms, double itl_ms, double decoding, int prefill, int decode,
                         double prompt = 512) {
  ObservedLatency o;
  o.first_token_rate = rate;
  o.uncached_prompt_tokens = prompt;
  o.context_tokens = 2048;
  o.ttft_ms = ttft_ms;
  o.ttft_count = ttft_ms > 0 ? 50 : 0;
  o.itl_ms = itl_ms;
  o.itl_count = itl_ms > 0 ? 5000 : 0;
  o.mean_decoding = decoding;
  o.prefill_workers = prefill;
  o.decode_workers = decode;
  return o;
}

TEST(ProfileCorrection, TheServiceTimeBehindAnObservedTtft) {
  // s = 0.25 s at 2 req/s on one worker: rho = 0.5, TTFT = 0.25 + 0.5 * 0.25 / (2 * 0.5) = 0.375 s.
  EXPECT_NEAR(ProfileCorrection::ServiceTimeForTtft(0.375, 2, 1), 0.25, 1e-9);
  // Two workers at twice the rate: the same queue each.
  EXPECT_NEAR(ProfileCorrection::ServiceTimeForTtft(0.375, 4, 2), 0.25, 1e-9);
  EXPECT_DOUBLE_EQ(ProfileCorrection::ServiceTimeForTtft(0.375, 0, 1), 0.375);  // no arrivals: no queue
  // A TTFT far above anything the steady queue gives: s stays below the saturation point n / r
  // (60 s at rho = 1 - 0.25 / 120, nearly).
  EXPECT_NEAR(ProfileCorrection::ServiceTimeForTtft(60, 4, 1), 0.25, 1e-3);
  EXPECT_LT(ProfileCorrection::ServiceTimeForTtft(60, 4, 1), 0.25);
  EXPECT_EQ(ProfileCorrection::ServiceTimeForTtft(0, 4, 1), 0);
}

TEST(ProfileCorrection, FactorsFromHandComputedIntervals) {
  const Profile p = TestProfile();
  ProfileCorrection c(CorrectionConfig{true, 1.0, 0.25, 4, 5});
  std::string why;
  // Prefill: 512 tokens take 50 ms in the profile. Observed at 2 req/s on one worker, TTFT
  // 112.5 ms = s + rho s / (2 (1 - rho)) for s = 100 ms (rho = 0.2): the factor is 2.
  // Decode: 32 decoding on 2 workers = batch 16, 20 ms in the profile; observed 30 ms: 1.5.
  c.Observe(p, Observed(2, 112.5, 30, 32, 1, 2), &why);
  EXPECT_NEAR(c.prefill(), 2, 1e-6);
  EXPECT_NEAR(c.decode(), 1.5, 1e-9);
  EXPECT_NE(why.find("x2.00"), std::string::npos) << why;
  EXPECT_NE(why.find("x1.50"), std::string::npos) << why;
  // Faster than the profile: batch 1 (1 decoding on 2 workers counts as 1) at 5 ms against 10: 0.5.
  c.Observe(p, Observed(0, 0, 5, 1, 1, 2), &why);
  EXPECT_NEAR(c.decode(), 0.5, 1e-9);
  EXPECT_NEAR(c.prefill(), 2, 1e-6);  // no first token in that interval: unchanged
}

TEST(ProfileCorrection, SmoothingBoundsMinimumSamplesAndOff) {
  const Profile p = TestProfile();
  ProfileCorrection c(CorrectionConfig{true, 0.5, 0.25, 4, 5});
  std::string why;
  c.Observe(p, Observed(0, 0, 80, 16, 1, 1), &why);  // 80 ms against 20: 4 observed
  EXPECT_NEAR(c.decode(), 2, 1e-9);                  // 1^0.5 * 4^0.5
  c.Observe(p, Observed(0, 0, 80, 16, 1, 1), &why);
  EXPECT_NEAR(c.decode(), std::sqrt(8.0), 1e-9);     // 2^0.5 * 4^0.5
  ProfileCorrection hard(CorrectionConfig{true, 1.0, 0.25, 4, 5});
  hard.Observe(p, Observed(0, 0, 2000, 16, 1, 1), &why);  // 100x the profile
  EXPECT_DOUBLE_EQ(hard.decode(), 4);
  hard.Observe(p, Observed(0, 0, 0.2, 16, 1, 1), &why);   // 1/100
  EXPECT_DOUBLE_EQ(hard.decode(), 0.25);
  ObservedLatency few = Observed(2, 112.5, 30, 32, 1, 2);
  few.ttft_count = few.itl_count = 4;  // below min_samples
  ProfileCorrection quiet(CorrectionConfig{true, 1.0, 0.25, 4, 5});
  quiet.Observe(p, few, &why);
  EXPECT_EQ(quiet.prefill(), 1);
  EXPECT_EQ(quiet.decode(), 1);
  ProfileCorrection off(CorrectionConfig{false, 1.0, 0.25, 4, 5});
  off.Observe(p, Observed(2, 112.5, 30, 32, 1, 2), &why);
  EXPECT_EQ(off.prefill(), 1);
  EXPECT_EQ(off.decode(), 1);
}

TEST(ProfileCorrection, PromptsTheDecodeWorkersPrefillThemselvesLeaveThePrefillFactor) {
  const Profile p = TestProfile();
  CorrectionConfig cfg{true, 1.0, 0.25, 4, 5};
  cfg.local_prefill_tokens = 64;
  ProfileCorrection c(cfg);
  std::string why;
  // 32-token prompts (prefilled on the decode workers) with a TTFT 3x the profile's 50 ms: kept.
  c.Observe(p, Observed(2, 150, 0, 0, 1, 1, /*prompt=*/32), &why);
  EXPECT_EQ(c.prefill(), 1);
  EXPECT_NE(why.find("prefilled on the decode workers"), std::string::npos) << why;
  // 512-token prompts go to the prefill pool: 112.5 ms at 2 req/s is a 100 ms service, x2.
  c.Observe(p, Observed(2, 112.5, 0, 0, 1, 1, /*prompt=*/512), &why);
  EXPECT_NEAR(c.prefill(), 2, 1e-6);
}

TEST(ProfileCorrection, AnIntervalInWhichARolesCountChangedLeavesItsFactor) {
  const Profile p = TestProfile();
  ProfileCorrection c(CorrectionConfig{true, 1.0, 0.25, 4, 5});
  std::string why;
  c.Observe(p, Observed(2, 112.5, 30, 32, 1, 2), &why);  // x2 and x1.5 as above
  // A second prefill worker started and a third decode one: neither factor moves this interval.
  c.Observe(p, Observed(2, 300, 80, 32, 2, 3), &why);
  EXPECT_NEAR(c.prefill(), 2, 1e-6);
  EXPECT_NEAR(c.decode(), 1.5, 1e-9);
  EXPECT_NE(why.find("each pool's count changed"), std::string::npos) << why;
  // The next interval at those counts moves them again: 2 workers at 4 first tokens/s with TTFT
  // 112.5 ms is the same 100 ms service (x2); 48 decoding on 3 = batch 16 at 40 ms (x2).
  c.Observe(p, Observed(4, 112.5, 40, 48, 2, 3), &why);
  EXPECT_NEAR(c.prefill(), 2, 1e-6);
  EXPECT_NEAR(c.decode(), 2, 1e-9);
}

TEST(ProfileCorrection, TheFactorsChangeTheReplicaCounts) {
  PlannerConfig cfg = Config();  // TTFT 1000 ms, ITL 30 ms
  cfg.correction = CorrectionConfig{true, 1.0, 0.25, 4, 5};
  auto planner = ReplicaPlanner::Create(cfg, TestProfile());
  ASSERT_TRUE(planner.ok());
  std::string why;
  // Before: prefill of 512 tokens 50 ms, rho_max = 2 * 0.95 / (1.9 + 0.05) = 0.974, 12 req/s
  // need 0.616 -> 1. Decode: MaxBatch(2048, 30) = 28 at 30 ms; 2 req/s x 256 x 0.030 = 15.36 in
  // decode -> 0.55 -> 1.
  EXPECT_EQ(planner->PrefillReplicas(12, 512, 0, &why), 1);
  EXPECT_EQ(planner->DecodeReplicas(2, 2048 - 128, 256, &why), 1);
  // An interval observed at twice the profile's prefill time and ITL 2x at batch 16.
  LoadSample s{true, 30, 2, 512, 256, 0, 0};
  s.observed_ttft_ms = 112.5;
  s.ttft_count = 60;
  s.first_token_rate = 2;
  s.observed_itl_ms = 40;
  s.itl_count = 15000;
  s.mean_decoding = 16;
  planner->Plan(s, 30, 1, 1);
  ASSERT_NEAR(planner->correction().prefill(), 2, 1e-6);
  ASSERT_NEAR(planner->correction().decode(), 2, 1e-9);
  // After: prefill 100 ms, rho_max = 1.8 / 1.9 = 0.947, need 12 x 0.1 / 0.947 = 1.27 -> 2.
  // Decode: the profile's ITL doubled, so MaxBatch(2048, 15) = 1 + 5 / 10 x 15 = 8.5 at 15 x 2 =
  // 30 ms; 15.36 in decode / 8.5 = 1.81 -> 2.
  EXPECT_EQ(planner->PrefillReplicas(12, 512, 0, &why), 2);
  EXPECT_EQ(planner->DecodeReplicas(2, 2048 - 128, 256, &why), 2);
}

}  // namespace
}  // namespace tandem::planner
