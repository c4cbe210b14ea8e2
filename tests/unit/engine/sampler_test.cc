#include "engine/sampler.h"

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include <gtest/gtest.h>

namespace tandem {
namespace {

SamplingParams Params(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  return p;
}

// Probabilities softmax([log 0.5, log 0.25, log 0.15, log 0.1]) = 0.5, 0.25, 0.15, 0.1.
std::vector<float> FourTokens() {
  return {std::log(0.5f), std::log(0.25f), std::log(0.15f), std::log(0.1f)};
}

std::map<int, int> Histogram(const std::vector<float>& logits, const SamplingParams& p, int n,
                             uint64_t seed = 1) {
  std::mt19937_64 gen(seed);
  std::map<int, int> h;
  for (int i = 0; i < n; ++i) ++h[SampleToken(logits, p, gen)];
  return h;
}

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  std::mt19937_64 gen(0);
  const std::vector<float> l = {0.1f, 3.0f, -1.0f, 3.0f, 2.9f};
  EXPECT_EQ(SampleToken(l, Params(0.0f), gen), 1);
  EXPECT_EQ(ArgMax(l), 1);
  // Greedy draws nothing from the generator.
  std::mt19937_64 fresh(0);
  EXPECT_EQ(gen(), fresh());
}

TEST(Sampler, TopKOneEqualsGreedy) {
  std::vector<float> l(1000);
  std::mt19937_64 noise(5);
  for (float& x : l) x = static_cast<float>(noise() % 10000) / 1000.0f;
  SamplingParams p = Params(1.5f);
  p.top_k = 1;
  std::mt19937_64 gen(3);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleToken(l, p, gen), ArgMax(l));
}

TEST(Sampler, FullDistributionFollowsSoftmax) {
  const auto h = Histogram(FourTokens(), Params(1.0f), 20000);
  EXPECT_NEAR(h.at(0) / 20000.0, 0.5, 0.02);
  EXPECT_NEAR(h.at(1) / 20000.0, 0.25, 0.02);
  EXPECT_NEAR(h.at(2) / 20000.0, 0.15, 0.02);
  EXPECT_NEAR(h.at(3) / 20000.0, 0.10, 0.02);
}

TEST(Sampler, TopPRestrictsToNucleus) {
  SamplingParams p = Params(1.0f);
  p.top_p = 0.7f;  // 0.5 + 0.25 = 0.75 >= 0.7: tokens 0 and 1
  auto h = Histogram(FourTokens(), p, 5000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(h[0] / 5000.0, 0.5 / 0.75, 0.03);
  p.top_p = 0.5f;  // token 0 alone reaches 0.5
  h = Histogram(FourTokens(), p, 1000);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, 0);
  p.top_p = 0.95f;  // 0.5 + 0.25 + 0.15 = 0.9 < 0.95: all four
  EXPECT_EQ(Histogram(FourTokens(), p, 5000).size(), 4u);
}

TEST(Sampler, TopPOnALargeVocab) {
  std::vector<float> l(50000, -10.0f);
  l[123] = 5.0f;
  l[77] = 4.5f;
  SamplingParams p = Params(1.0f);
  p.top_p = 0.9f;
  const auto h = Histogram(l, p, 2000);
  for (const auto& [id, n] : h) EXPECT_TRUE(id == 123 || id == 77) << id;
  EXPECT_EQ(h.size(), 2u);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplingParams p = Params(1.0f);
  p.min_p = 0.35f;  // threshold 0.35 * 0.5 = 0.175: tokens 0 (0.5) and 1 (0.25)
  auto h = Histogram(FourTokens(), p, 5000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(0) && h.count(1));
  p.min_p = 0.25f;  // threshold 0.125: tokens 0, 1, 2
  EXPECT_EQ(Histogram(FourTokens(), p, 5000).size(), 3u);
}

TEST(Sampler, TopKRestricts) {
  SamplingParams p = Params(1.0f);
  p.top_k = 3;
  const auto h = Histogram(FourTokens(), p, 5000);
  EXPECT_EQ(h.size(), 3u);
  EXPECT_FALSE(h.count(3));
}

TEST(Sampler, TemperatureSharpens) {
  SamplingParams p = Params(0.25f);  // p ∝ p^4: 0.0625, 0.0039, ... -> token 0 ~ 93%
  const auto h = Histogram(FourTokens(), p, 5000);
  EXPECT_GT(h.at(0) / 5000.0, 0.9);
}

TEST(Sampler, SeedsReproduce) {
  const auto l = FourTokens();
  SamplingParams p = Params(1.0f);
  std::vector<int> a, b, c;
  std::mt19937_64 g1(42), g2(42), g3(43);
  for (int i = 0; i < 64; ++i) {
    a.push_back(SampleToken(l, p, g1));
    b.push_back(SampleToken(l, p, g2));
    c.push_back(SampleToken(l, p, g3));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, RepetitionPenaltyFormula) {
  std::vector<float> l = {2.0f, -2.0f, 2.0f, -2.0f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0, 1, 1};
  const std::vector<int32_t> output = {3};
  ApplyPenalties(l, prompt, output, p);
  EXPECT_FLOAT_EQ(l[0], 1.0f);   // positive: divided
  EXPECT_FLOAT_EQ(l[1], -4.0f);  // negative: multiplied, once despite appearing twice
  EXPECT_FLOAT_EQ(l[2], 2.0f);   // unseen
  EXPECT_FLOAT_EQ(l[3], -4.0f);  // seen in the output
  EXPECT_FLOAT_EQ(l[4], 1.0f);
}

TEST(Sampler, FrequencyAndPresencePenaltiesOnOutputOnly) {
  std::vector<float> l = {1.0f, 1.0f, 1.0f, 1.0f};
  SamplingParams p;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {0, 0, 0};
  const std::vector<int32_t> output = {1, 2, 2, 2};
  ApplyPenalties(l, prompt, output, p);
  EXPECT_FLOAT_EQ(l[0], 1.0f);                // prompt tokens are not penalized
  EXPECT_FLOAT_EQ(l[1], 1.0f - 0.5f - 0.25f);  // count 1
  EXPECT_FLOAT_EQ(l[2], 1.0f - 1.5f - 0.25f);  // count 3
  EXPECT_FLOAT_EQ(l[3], 1.0f);
}

TEST(Sampler, LogprobsAreLogSoftmaxBestFirst) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
  const TokenLogprob lp = ComputeLogprobs(l, 2, 3);
  double z = 0;
  for (float x : l) z += std::exp(x);
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // tie 1 vs 3: lower id first
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3.0 - std::log(z), 1e-5);
  EXPECT_TRUE(ComputeLogprobs(l, 0, 0).top.empty());
}

}  // namespace
}  // namespace tandem
