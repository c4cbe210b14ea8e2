// The engine over ModelRunner::Execute: greedy rows without penalties are picked by the runner
// (kArgmax), the others go through the host sampler; both must give what the host sampler gives.
// Also the KV pool sized from a device runner's free memory (kv_cache_sizing.h).
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine_test_util.h"
#include "fake_model_runner.h"

namespace tandem {
namespace {

using testing::Collected;
using testing::FakeModelRunner;
using testing::Greedy;
using testing::RunToCompletion;

// Rows on a coarse grid (values -2..2 in steps of 0.5), so most rows have ties at the top.
std::vector<float> CoarseRow(std::mt19937_64& rng, int vocab) {
  std::vector<float> row(vocab);
  for (float& x : row) x = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.5f;
  return row;
}

void ExpectSameLogprob(const TokenLogprob& host, const ArgmaxSample& pick, int k) {
  EXPECT_EQ(pick.token_id, host.token_id);
  if (k < 0) return;
  EXPECT_EQ(pick.logprob, host.logprob);  // the same arithmetic: bit-identical
  ASSERT_EQ(pick.top.size(), host.top.size());
  for (size_t i = 0; i < host.top.size(); ++i) {
    EXPECT_EQ(pick.top[i].first, host.top[i].first) << i;
    EXPECT_EQ(pick.top[i].second, host.top[i].second) << i;
  }
}

TEST(EngineExecute, PickArgmaxEqualsHostSamplerWithTies) {
  std::mt19937_64 rng(7);
  std::mt19937_64 unused(0);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (int vocab : {1, 2, 5, 37, 1000}) {
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<float> row = CoarseRow(rng, vocab);
      for (int k : {-1, 0, 1, 3, 20}) {
        if (k > vocab) continue;
        SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " trial " << trial << " k " << k);
        const int32_t token = SampleToken(row, greedy, unused);
        const TokenLogprob host = ComputeLogprobs(row, token, std::max(k, 0));
        const ArgmaxSample pick = PickArgmax(row, k);
        ExpectSameLogprob(host, pick, k);
        // Ties: the lowest id of the maxima; top: best first, lower id first among equals.
        const float mx = *std::max_element(row.begin(), row.end());
        EXPECT_EQ(pick.token_id, std::find(row.begin(), row.end(), mx) - row.begin());
        for (size_t i = 1; i < pick.top.size(); ++i) {
          const auto& [a, la] = pick.top[i - 1];
          const auto& [b, lb] = pick.top[i];
          EXPECT_TRUE(la > lb || (la == lb && a < b)) << i;
        }
      }
    }
  }
}

// The fake's logits rounded to a coarse grid (ties at the top in most rows); records what each
// step asked for. Execute is the base class's (host PickArgmax), as on the CPU runner.
class CoarseRunner : public FakeModelRunner {
 public:
  explicit CoarseRunner(int vocab = 64) : FakeModelRunner(vocab, 4096) {}
  static float Coarse(float x) { return std::round(x); }  // -5..5: 11 values over 64 ids
  std::vector<float> CoarseReference(const std::vector<int32_t>& tokens) const {
    std::vector<float> l = ReferenceLogits(tokens);
    for (float& x : l) x = Coarse(x);
    return l;
  }
  Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override {
    Status st = FakeModelRunner::Forward(batch, logits);
    for (float& x : *logits) x = Coarse(x);
    return st;
  }
  Status Execute(const ForwardBatch& batch, ForwardOutput* out) override {
    for (const SequenceSlice& s : batch.seqs) {
      if (s.logits == SequenceSlice::Logits::kArgmax) {
        ++num_argmax_rows;
        last_num_logprobs = s.num_logprobs;
      }
      if (s.logits == SequenceSlice::Logits::kLast) ++num_last_rows;
    }
    return ModelRunner::Execute(batch, out);
  }
  int num_argmax_rows = 0;
  int num_last_rows = 0;
  int last_num_logprobs = -2;
};

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 13 + salt * 7 + 1) % 64;
  return p;
}

EngineConfig SmallConfig(int budget = 2048) {
  EngineConfig c;
  c.block_size = 4;
  c.num_kv_blocks = 512;
  c.max_num_batched_tokens = budget;
  return c;
}

struct Fixture {
  explicit Fixture(EngineConfig config = SmallConfig()) {
    auto runner = std::make_unique<CoarseRunner>();
    fake = runner.get();
    auto e = Engine::Create(std::move(runner), nullptr, config);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine = std::move(e).value();
  }
  CoarseRunner* fake = nullptr;
  std::unique_ptr<Engine> engine;
};

// What the host sampler makes of the coarse logits along the history (temperature 0).
void ExpectHostSamplerResult(const CoarseRunner& fake, std::vector<int32_t> history,
                             const Collected& got, int logprobs) {
  std::mt19937_64 unused(0);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  ASSERT_EQ(got.logprobs.size(), logprobs >= 0 ? got.token_ids.size() : 0u);
  for (size_t i = 0; i < got.token_ids.size(); ++i) {
    const std::vector<float> l = fake.CoarseReference(history);
    const int32_t token = SampleToken(l, greedy, unused);
    ASSERT_EQ(got.token_ids[i], token) << i;
    if (logprobs >= 0) {
      const TokenLogprob host = ComputeLogprobs(l, token, logprobs);
      const TokenLogprob& lp = got.logprobs[i];
      EXPECT_EQ(lp.token_id, host.token_id);
      EXPECT_EQ(lp.logprob, host.logprob) << i;
      EXPECT_EQ(lp.top, host.top) << i;
    }
    history.push_back(token);
  }
}

TEST(EngineExecute, GreedyRowsPickedByRunnerMatchHostSampler) {
  Fixture f(SmallConfig(/*budget=*/5));  // chunked prefill: rows that sample and rows that do not
  const std::vector<int> logprobs = {-1, 0, 2, 20};
  for (size_t i = 0; i < logprobs.size(); ++i) {
    SamplingParams p = Greedy(12);
    p.logprobs = logprobs[i];
    ASSERT_TRUE(f.engine->AddRequest("r" + std::to_string(i), Prompt(3 + 4 * i, i), p).ok());
  }
  auto got = RunToCompletion(*f.engine);
  for (size_t i = 0; i < logprobs.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "logprobs " << logprobs[i]);
    ExpectHostSamplerResult(*f.fake, Prompt(3 + 4 * i, i), got["r" + std::to_string(i)],
                            logprobs[i]);
  }
  EXPECT_EQ(f.fake->num_argmax_rows, 4 * 12);
  EXPECT_EQ(f.fake->num_last_rows, 0);
  EXPECT_TRUE(f.fake->errors.empty());
}

TEST(EngineExecute, LogprobsBeyondTheVocabAreClampedAsOnTheHost) {
  auto runner = std::make_unique<CoarseRunner>(/*vocab=*/8);
  CoarseRunner* fake = runner.get();
  SamplingParams p = Greedy(6);
  p.logprobs = 20;  // allowed (<= 20), more than the vocabulary: the host sampler gives all 8
  auto e = Engine::Create(std::move(runner), nullptr, SmallConfig());
  ASSERT_TRUE(e.ok());
  const std::vector<int32_t> prompt = {1, 7, 0, 3, 3};
  ASSERT_TRUE((*e)->AddRequest("a", prompt, p).ok());
  auto got = RunToCompletion(**e);
  EXPECT_EQ(fake->last_num_logprobs, 8);
  ASSERT_EQ(got["a"].finish_reason, FinishReason::kLength);
  ExpectHostSamplerResult(*fake, prompt, got["a"], 20);
  EXPECT_EQ(got["a"].logprobs.front().top.size(), 8u);
}

TEST(EngineExecute, MixedBatchRoutesRowsAndKeepsEachRequestsTokens) {
  SamplingParams sampled;
  sampled.temperature = 0.9f;
  sampled.seed = 99;
  sampled.max_tokens = 10;
  sampled.logprobs = 2;
  SamplingParams penalized = Greedy(10);
  penalized.repetition_penalty = 1.3f;
  penalized.logprobs = 1;
  SamplingParams greedy = Greedy(10);
  greedy.logprobs = 3;
  const std::vector<std::pair<std::string, SamplingParams>> requests = {
      {"greedy", greedy}, {"sampled", sampled}, {"penalized", penalized}};
  // Each request alone, then all three in one batch.
  std::map<std::string, Collected> alone;
  for (size_t i = 0; i < requests.size(); ++i) {
    Fixture f;
    ASSERT_TRUE(f.engine->AddRequest(requests[i].first, Prompt(6 + i, i), requests[i].second).ok());
    alone[requests[i].first] = RunToCompletion(*f.engine)[requests[i].first];
    const bool by_runner = requests[i].first == "greedy";
    EXPECT_EQ(f.fake->num_argmax_rows, by_runner ? 10 : 0) << requests[i].first;
    EXPECT_EQ(f.fake->num_last_rows, by_runner ? 0 : 10) << requests[i].first;
  }
  Fixture f(SmallConfig(/*budget=*/7));
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(f.engine->AddRequest(requests[i].first, Prompt(6 + i, i), requests[i].second).ok());
  }
  auto got = RunToCompletion(*f.engine);
  for (const auto& [id, params] : requests) {
    EXPECT_EQ(got[id].token_ids, alone[id].token_ids) << id;
    ASSERT_EQ(got[id].logprobs.size(), alone[id].logprobs.size()) << id;
    for (size_t i = 0; i < got[id].logprobs.size(); ++i) {
      EXPECT_EQ(got[id].logprobs[i].logprob, alone[id].logprobs[i].logprob) << id << " " << i;
      EXPECT_EQ(got[id].logprobs[i].top, alone[id].logprobs[i].top) << id << " " << i;
    }
  }
  ExpectHostSamplerResult(*f.fake, Prompt(6, 0), got["greedy"], 3);
  EXPECT_EQ(f.fake->num_argmax_rows, 10);
  EXPECT_EQ(f.fake->num_last_rows, 20);
}

TEST(EngineExecute, WrongNumberOfPicksIsAnError) {
  class Dropping : public CoarseRunner {
    Status Execute(const ForwardBatch& batch, ForwardOutput* out) override {
      Status st = CoarseRunner::Execute(batch, out);
      out->samples.clear();
      return st;
    }
  };
  auto e = Engine::Create(std::make_unique<Dropping>(), nullptr, SmallConfig());
  ASSERT_TRUE(e.ok());
  ASSERT_TRUE((*e)->AddRequest("a", Prompt(5, 1), Greedy(3)).ok());
  auto got = RunToCompletion(**e);
  EXPECT_EQ(got["a"].finish_reason, FinishReason::kError);
  EXPECT_NE(got["a"].error.find("greedy picks"), std::string::npos) << got["a"].error;
  EXPECT_EQ((*e)->Stats().num_kv_blocks_used, 0);
}

}  // namespace
}  // namespace tandem
