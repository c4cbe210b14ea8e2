#include <algorithm>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "loadgen/report.h"
#include "loadgen/stats.h"

namespace tandem::bench {
namespace {

// Brute force: the order statistics by repeated minimum extraction, then the linear interpolation
// of numpy's default method at rank q/100 * (n - 1).
double BrutePercentile(std::vector<double> v, double q) {
  std::vector<double> order;
  while (!v.empty()) {
    auto it = std::min_element(v.begin(), v.end());
    order.push_back(*it);
    v.erase(it);
  }
  const double rank = q / 100.0 * (order.size() - 1);
  const size_t below = static_cast<size_t>(rank);
  if (below + 1 >= order.size()) return order.back();
  return order[below] * (1 - (rank - below)) + order[below + 1] * (rank - below);
}

TEST(Stats, PercentilesMatchBruteForce) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 300);
    std::vector<double> v;
    std::lognormal_distribution<double> d(3, 1);
    for (int i = 0; i < n; ++i) v.push_back(d(rng));
    const Distribution s = Summarize(v);
    EXPECT_NEAR(s.p50, BrutePercentile(v, 50), 1e-9);
    EXPECT_NEAR(s.p90, BrutePercentile(v, 90), 1e-9);
    EXPECT_NEAR(s.p95, BrutePercentile(v, 95), 1e-9);
    EXPECT_NEAR(s.p99, BrutePercentile(v, 99), 1e-9);
    EXPECT_EQ(s.min, *std::min_element(v.begin(), v.end()));
    EXPECT_EQ(s.max, *std::max_element(v.begin(), v.end()));
    double mean = 0;
    for (double x : v) mean += x / n;
    EXPECT_NEAR(s.mean, mean, 1e-9 * std::abs(mean));
  }
}

TEST(Stats, KnownValues) {
  std::vector<double> v;
  for (int i = 1; i <= 101; ++i) v.push_back(i);
  const Distribution s = Summarize(v);
  EXPECT_DOUBLE_EQ(s.p50, 51);
  EXPECT_DOUBLE_EQ(s.p90, 91);
  EXPECT_DOUBLE_EQ(s.p99, 100);
  EXPECT_EQ(Summarize({}).count, 0u);
  EXPECT_DOUBLE_EQ(Summarize({7}).p99, 7);
  EXPECT_DOUBLE_EQ(Percentile({1, 2}, 50), 1.5);
}

TEST(Stats, ParseSlo) {
  auto slo = ParseSlo("ttft=200ms,itl=25,e2e=2s,tpot=500us");
  ASSERT_TRUE(slo.ok());
  EXPECT_DOUBLE_EQ(*slo->ttft_s, 0.2);
  EXPECT_DOUBLE_EQ(*slo->itl_s, 0.025);
  EXPECT_DOUBLE_EQ(*slo->e2e_s, 2);
  EXPECT_DOUBLE_EQ(*slo->tpot_s, 0.0005);
  EXPECT_FALSE(ParseSlo("ttft").ok());
  EXPECT_FALSE(ParseSlo("foo=1ms").ok());
  EXPECT_FALSE(ParseSlo("ttft=-1ms").ok());
  EXPECT_FALSE(ParseSlo("ttft=1h").ok());
  EXPECT_TRUE(ParseSlo("").ok());
}

RequestRecord Ok(double ttft, double gap, int tokens) {
  RequestRecord r;
  r.ttft_s = ttft;
  for (int i = 0; i < tokens; ++i) r.chunk_times_s.push_back(ttft + gap * i);
  r.e2e_s = r.chunk_times_s.back() + 0.001;
  r.completion_tokens = tokens;
  r.prompt_tokens = 10;
  r.expected_output_tokens = tokens;
  return r;
}

TEST(Stats, SummarizeRun) {
  RunResult run;
  run.label = "c=2";
  run.config.concurrency = 2;
  run.duration_s = 2.0;
  run.records.push_back(Ok(0.1, 0.01, 5));   // meets ttft=200ms,itl=20ms
  run.records.push_back(Ok(0.3, 0.01, 5));   // ttft too slow
  run.records.push_back(Ok(0.1, 0.05, 3));   // itl too slow
  RequestRecord mismatch = Ok(0.1, 0.01, 4);
  mismatch.completion_tokens = 5;  // one chunk held two tokens
  mismatch.expected_output_tokens = 6;
  run.records.push_back(mismatch);
  // Cache hits of the requests that report them: (4 + 0) of (10 + 10) prompt tokens; the other
  // two report none and do not count.
  run.records[0].cached_tokens = 4;
  run.records[1].cached_tokens = 0;
  RequestRecord failed;
  failed.error = ErrorKind::kHttpStatus;
  failed.http_status = 503;
  run.records.push_back(failed);
  auto slo = ParseSlo("ttft=200ms,itl=20ms");
  ASSERT_TRUE(slo.ok());
  const RunSummary s = Summarize(run, *slo);
  EXPECT_EQ(s.num_requests, 5);
  EXPECT_EQ(s.num_ok, 4);
  EXPECT_EQ(s.num_errors, 1);
  EXPECT_EQ(s.errors.at("http_503"), 1);
  EXPECT_EQ(s.num_slo_met, 2);
  EXPECT_DOUBLE_EQ(s.goodput, 1.0);
  EXPECT_DOUBLE_EQ(s.request_throughput, 2.0);
  EXPECT_EQ(s.total_output_tokens, 5 + 5 + 3 + 5);
  EXPECT_DOUBLE_EQ(s.output_throughput, 9.0);
  EXPECT_EQ(s.chunk_usage_mismatch, 1);
  EXPECT_EQ(s.output_len_mismatch, 1);
  EXPECT_EQ(s.cached_input_tokens, 4);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hit_rate, 4.0 / 20.0);
  EXPECT_EQ(s.ttft_ms.count, 4u);
  EXPECT_EQ(s.itl_ms.count, 4u + 4u + 2u + 3u);
  EXPECT_NEAR(s.ttft_ms.max, 300, 1e-9);
  // TPOT = (e2e - ttft) / (tokens - 1): (0.04 + 0.001) / 4 for the first.
  EXPECT_NEAR(Tpot(run.records[0]), 0.041 / 4, 1e-12);
  EXPECT_NEAR(MeanItl(run.records[2]), 0.05, 1e-12);
  EXPECT_EQ(s.ttft_returning_ms.count, 0u) << "no multi-turn sessions";
}

TEST(Stats, FirstAndReturningTurnsHaveTheirOwnTtft) {
  RunResult run;
  run.duration_s = 1.0;
  for (int turn = 0; turn < 3; ++turn) {
    for (int session = 0; session < 2; ++session) {
      RequestRecord r = Ok(turn == 0 ? 0.4 : 0.1 * turn, 0.01, 3);
      r.item_id = session;
      r.turn = turn;
      run.records.push_back(r);
    }
  }
  const RunSummary s = Summarize(run, Slo{});
  EXPECT_EQ(s.ttft_first_turn_ms.count, 2u);
  EXPECT_NEAR(s.ttft_first_turn_ms.mean, 400, 1e-9);
  EXPECT_EQ(s.ttft_returning_ms.count, 4u);
  EXPECT_NEAR(s.ttft_returning_ms.mean, 150, 1e-9);  // (100 + 100 + 200 + 200) / 4
  EXPECT_NE(FormatTable({s}).find("returning turns mean 150 ms"), std::string::npos) << FormatTable({s});
}

}  // namespace
}  // namespace tandem::bench
