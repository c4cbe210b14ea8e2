// SampleToken = SampleTokenWithUniform(UniformDouble(generator)) must give exactly the tokens (and
// generator states) of the sampler before the split; the penalty entries (what the GPU pick gets)
// must penalize exactly as ApplyPenalties.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "engine/sampler.h"
#include "kernels/cpu/sample.h"

namespace tandem {
namespace {

// The sampler as it was before SampleTokenWithUniform (commit bbcff7c), frozen here as the oracle.
int32_t FrozenSampleToken(std::span<const float> logits, const SamplingParams& params,
                          std::mt19937_64& generator) {
  const int vocab = static_cast<int>(logits.size());
  if (params.temperature <= 0.0f) return ArgMax(logits);
  const float max_logit = logits[ArgMax(logits)];
  const double inv_t = 1.0 / params.temperature;
  std::vector<double> p(vocab);
  for (int i = 0; i < vocab; ++i) p[i] = std::exp((logits[i] - max_logit) * inv_t);
  if (params.min_p > 0.0f) {
    for (double& x : p) {
      if (x < params.min_p) x = 0.0;
    }
  }
  auto by_prob = [&](int32_t a, int32_t b) { return p[a] != p[b] ? p[a] > p[b] : a < b; };
  std::vector<int32_t> cand;
  for (int i = 0; i < vocab; ++i) {
    if (p[i] > 0.0) cand.push_back(i);
  }
  bool sorted = false;
  if (params.top_k > 0 && params.top_k < static_cast<int>(cand.size())) {
    std::nth_element(cand.begin(), cand.begin() + params.top_k, cand.end(), by_prob);
    for (size_t i = params.top_k; i < cand.size(); ++i) p[cand[i]] = 0.0;
    cand.resize(params.top_k);
  }
  if (params.top_p < 1.0f) {
    double total = 0.0;
    for (int32_t id : cand) total += p[id];
    const double target = params.top_p * total;
    std::vector<int32_t> head;
    double head_mass = 0.0;
    for (int32_t id : cand) {
      if (p[id] >= 1e-4) {
        head.push_back(id);
        head_mass += p[id];
      }
    }
    std::vector<int32_t>& order = head_mass >= target ? head : cand;
    std::sort(order.begin(), order.end(), by_prob);
    sorted = true;
    double cum = 0.0;
    size_t keep = 0;
    while (keep < order.size()) {
      cum += p[order[keep++]];
      if (cum >= target) break;
    }
    for (size_t i = keep; i < order.size(); ++i) p[order[i]] = 0.0;
    order.resize(keep);
    if (&order != &cand) cand = std::move(order);
  }
  if (!sorted) std::sort(cand.begin(), cand.end());
  double total = 0.0;
  for (int32_t id : cand) total += p[id];
  const double u = UniformDouble(generator) * total;
  double cum = 0.0;
  for (int32_t id : cand) {
    cum += p[id];
    if (u < cum) return id;
  }
  return cand.back();
}

std::vector<float> RandomLogits(int vocab, std::mt19937_64& rng, bool ties) {
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> l(vocab);
  for (float& x : l) x = ties ? std::round(normal(rng) * 2.0f) / 2.0f : normal(rng);
  return l;
}

// `draws` tokens from SampleToken and from the frozen sampler, each with a generator seeded
// `seed`: success when every pair is equal and both used the same number of draws.
::testing::AssertionResult SameDraws(const std::vector<float>& logits, float t, int k, float tp, float mp,
                                     uint64_t seed, int draws) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = k;
  p.top_p = tp;
  p.min_p = mp;
  std::mt19937_64 a(seed), b(seed);
  for (int draw = 0; draw < draws; ++draw) {
    const int32_t got = SampleToken(logits, p, a), want = FrozenSampleToken(logits, p, b);
    if (got != want) {
      return ::testing::AssertionFailure() << "draw " << draw << ": " << got << " != " << want << " (T " << t
                                           << " k " << k << " top_p " << tp << " min_p " << mp << ")";
    }
  }
  if (a() != b()) return ::testing::AssertionFailure() << "a different number of draws";
  return ::testing::AssertionSuccess();
}

TEST(SamplerUniform, SampleTokenEqualsTheFrozenSamplerForManySeedsAndParams) {
  const float temps[] = {0.0f, 0.5f, 1.0f, 1.5f};
  const int top_ks[] = {0, 1, 50, 3000};
  const float top_ps[] = {0.5f, 0.9f, 1.0f};
  const float min_ps[] = {0.0f, 0.1f};
  std::mt19937_64 rng(20261201);
  int checked = 0;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    const auto logits = RandomLogits(3000, rng, seed % 2 == 1);
    for (float t : temps) for (int k : top_ks) for (float tp : top_ps) for (float mp : min_ps) {
      ASSERT_TRUE(SameDraws(logits, t, k, tp, mp, seed * 1000 + k, 4)) << "seed " << seed;
      checked += 4;
    }
  }
  EXPECT_EQ(checked, 6 * 4 * 4 * 3 * 2 * 4);
}

// Top-k rows as chat traffic sends them (Qwen3's defaults and neighbours) on a large vocabulary:
// the sampler's top-k from the k best logits (no exp over the whole row) against the frozen
// whole-row sampler, on plain, tied and clamped logits; rows whose k-th best equals the max, or
// that hold -inf, take the whole-row path and must agree too.
TEST(SamplerUniform, TopKRowsEqualTheFrozenSampler) {
  std::mt19937_64 rng(20261207);
  int checked = 0;
  for (int row = 0; row < 24; ++row) {
    auto logits = RandomLogits(20000, rng, row % 3 == 1);
    if (row % 6 == 2) {  // many at the max: the k-th best is the max
      for (int i = 0; i < 60; ++i) logits[(i * 331) % 20000] = 30.0f;
    }
    if (row % 6 == 5) {  // masked ids
      for (int i = 0; i < 20000; i += 3) logits[i] = -std::numeric_limits<float>::infinity();
    }
    for (float t : {0.6f, 1.0f}) for (int k : {20, 40}) for (float tp : {0.95f, 1.0f}) for (float mp : {0.0f, 0.05f}) {
      ASSERT_TRUE(SameDraws(logits, t, k, tp, mp, row * 7919 + k, 6)) << "row " << row;
      checked += 6;
    }
  }
  EXPECT_EQ(checked, 24 * 16 * 6);
}

TEST(SamplerUniform, WithUniformIsTheDrawnPick) {
  std::mt19937_64 rng(7);
  const auto logits = RandomLogits(500, rng, false);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  std::mt19937_64 gen(42), copy(42);
  for (int i = 0; i < 100; ++i) {
    const int32_t token = SampleToken(logits, p, gen);
    EXPECT_EQ(token, SampleTokenWithUniform(logits, p, UniformDouble(copy)));
  }
  // u at the ends of [0, 1): the most likely token first (top-p order) and a valid id last.
  EXPECT_EQ(SampleTokenWithUniform(logits, p, 0.0), ArgMax(logits));
  const int32_t last = SampleTokenWithUniform(logits, p, std::nextafter(1.0, 0.0));
  EXPECT_GE(last, 0);
  EXPECT_LT(last, 500);
}

TEST(SamplerUniform, PenaltyEntriesPenalizeAsApplyPenalties) {
  std::mt19937_64 rng(11);
  const int vocab = 200;
  std::uniform_int_distribution<int32_t> id(-3, vocab + 2);  // a few ids outside the vocab
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int32_t> prompt(trial * 7), output(trial * 5);
    for (int32_t& x : prompt) x = id(rng);
    for (int32_t& x : output) x = id(rng);
    SamplingParams p;
    p.repetition_penalty = trial % 3 == 0 ? 1.0f : 1.3f;
    p.frequency_penalty = trial % 2 == 0 ? 0.7f : 0.0f;
    p.presence_penalty = trial % 4 == 1 ? 0.0f : 0.45f;
    auto logits = RandomLogits(vocab, rng, false);
    auto expected = logits;
    ApplyPenalties(expected, prompt, output, p);
    const auto entries = cpu::MakePenaltyEntries(prompt, output, vocab);
    cpu::ApplyPenaltyEntries(logits, entries, p.repetition_penalty, p.frequency_penalty,
                             p.presence_penalty);
    ASSERT_EQ(std::memcmp(logits.data(), expected.data(), vocab * sizeof(float)), 0)
        << "trial " << trial;
    // Unique ids, counts = occurrences in the output.
    for (const auto& e : entries) {
      EXPECT_EQ(e.output_count, std::count(output.begin(), output.end(), e.token_id));
      EXPECT_EQ(std::count_if(entries.begin(), entries.end(),
                              [&](const auto& o) { return o.token_id == e.token_id; }), 1);
    }
  }
}

}  // namespace
}  // namespace tandem
