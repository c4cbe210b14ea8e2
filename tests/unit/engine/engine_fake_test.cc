// The engine over FakeModelRunner: paging, chunking, prefix caching, preemption, stops, errors.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "model/step_timeline.h"
#include "engine_test_util.h"
#include "fake_model_runner.h"

namespace tandem {
namespace {

using testing::Collected;
using testing::FakeModelRunner;
using testing::Greedy;
using testing::RunToCompletion;

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (i * 31 + salt * 17 + 3) % 500;
  return p;
}

struct Fixture {
  explicit Fixture(EngineConfig config, std::vector<int> eos = {}) {
    auto runner = std::make_unique<FakeModelRunner>(512, 4096, eos);
    fake = runner.get();
    auto e = Engine::Create(std::move(runner), nullptr, config);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    engine = std::move(e).value();
  }
  FakeModelRunner* fake = nullptr;
  std::unique_ptr<Engine> engine;
};

EngineConfig SmallConfig(int block_size = 4, int num_blocks = 256, int budget = 2048, int seqs = 64) {
  EngineConfig c;
  c.block_size = block_size;
  c.num_kv_blocks = num_blocks;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = seqs;
  return c;
}

// Prompts of lengths around block boundaries for block size 4.
const std::vector<int> kLengths = {1, 3, 4, 5, 8, 9, 15, 16, 17, 30};

void ExpectMatchesReference(const FakeModelRunner& fake, std::map<std::string, Collected>& got,
                            int max_tokens) {
  for (size_t i = 0; i < kLengths.size(); ++i) {
    const Collected& c = got["r" + std::to_string(i)];
    EXPECT_EQ(c.token_ids, fake.GreedyReference(Prompt(kLengths[i], i), max_tokens)) << i;
    EXPECT_EQ(c.finish_reason, FinishReason::kLength);
  }
  EXPECT_TRUE(fake.errors.empty()) << fake.errors.front();
}

TEST(EngineFake, GreedyBatchedMatchesReference) {
  Fixture f(SmallConfig());
  for (size_t i = 0; i < kLengths.size(); ++i) {
    ASSERT_TRUE(f.engine->AddRequest("r" + std::to_string(i), Prompt(kLengths[i], i), Greedy(12)).ok());
  }
  auto got = RunToCompletion(*f.engine);
  ExpectMatchesReference(*f.fake, got, 12);
  EXPECT_EQ(f.engine->Stats().num_kv_blocks_used, 0);
}

TEST(EngineFake, ChunkedPrefillAtManyBudgetsMatchesReference) {
  for (int budget : {1, 2, 3, 7, 16}) {
    for (int seqs : {1, 3, 64}) {
      Fixture f(SmallConfig(4, 256, budget, seqs));
      for (size_t i = 0; i < kLengths.size(); ++i) {
        ASSERT_TRUE(
            f.engine->AddRequest("r" + std::to_string(i), Prompt(kLengths[i], i), Greedy(6)).ok());
      }
      auto got = RunToCompletion(*f.engine);
      SCOPED_TRACE(::testing::Message() << "budget " << budget << " seqs " << seqs);
      ExpectMatchesReference(*f.fake, got, 6);
      EXPECT_LE(f.fake->max_step_tokens, budget);
      EXPECT_LE(f.fake->max_step_seqs, seqs);
      EXPECT_EQ(f.engine->Stats().num_kv_blocks_used, 0);
    }
  }
}

TEST(EngineFake, PrefixCacheHitGivesSameTokensAndSkipsWork) {
  for (int len : {7, 8, 9, 15, 16, 17}) {
    Fixture f(SmallConfig(4));
    ASSERT_TRUE(f.engine->AddRequest("a", Prompt(len, 1), Greedy(5)).ok());
    auto first = RunToCompletion(*f.engine);
    const int64_t computed_first = f.fake->num_tokens_computed;
    ASSERT_TRUE(f.engine->AddRequest("b", Prompt(len, 1), Greedy(5)).ok());
    auto second = RunToCompletion(*f.engine);
    SCOPED_TRACE(len);
    EXPECT_EQ(first["a"].token_ids, second["b"].token_ids);
    EXPECT_EQ(first["a"].num_cached_tokens, 0);
    // Full blocks only, never the whole prompt.
    EXPECT_EQ(second["b"].num_cached_tokens, (len - 1) / 4 * 4);
    EXPECT_EQ(f.fake->num_tokens_computed - computed_first,
              computed_first - second["b"].num_cached_tokens);
    EXPECT_TRUE(f.fake->errors.empty());
    const EngineStats s = f.engine->Stats();
    EXPECT_EQ(s.prefix_cache_queries, static_cast<uint64_t>(2 * len));
    EXPECT_EQ(s.prefix_cache_hits, static_cast<uint64_t>((len - 1) / 4 * 4));
    EXPECT_EQ(s.num_kv_blocks_used, 0);
  }
}

TEST(EngineFake, SharedPrefixesWhileRunning) {
  // Requests that share a prefix run at the same time; later ones hit blocks still in use.
  Fixture f(SmallConfig(4, 256, 8));
  std::vector<int32_t> head = Prompt(12, 9);
  std::map<std::string, Collected> got;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = head;
    for (int k = 0; k <= i; ++k) p.push_back(400 + k + i);
    ASSERT_TRUE(f.engine->AddRequest("s" + std::to_string(i), p, Greedy(8)).ok());
    testing::Absorb(got, f.engine->Step());
  }
  got = RunToCompletion(*f.engine, std::move(got));
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = head;
    for (int k = 0; k <= i; ++k) p.push_back(400 + k + i);
    EXPECT_EQ(got["s" + std::to_string(i)].token_ids, f.fake->GreedyReference(p, 8)) << i;
  }
  EXPECT_TRUE(f.fake->errors.empty());
  EXPECT_GT(f.engine->Stats().prefix_cache_hits, 0u);
  EXPECT_EQ(f.engine->Stats().num_kv_blocks_used, 0);
}

TEST(EngineFake, PreemptionRecomputesAndKeepsTokens) {
  // 12 blocks of 4 tokens = 48 token slots; 4 requests growing to 6 + 20 = 26 tokens each.
  for (bool caching : {true, false}) {
    EngineConfig c = SmallConfig(4, 12, 64);
    c.enable_prefix_caching = caching;
    Fixture f(c);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 4; ++i) {
      prompts.push_back(Prompt(6, 40 + i));
      ASSERT_TRUE(f.engine->AddRequest("p" + std::to_string(i), prompts.back(), Greedy(20)).ok());
    }
    auto got = RunToCompletion(*f.engine);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got["p" + std::to_string(i)].token_ids, f.fake->GreedyReference(prompts[i], 20)) << i;
    }
    EXPECT_TRUE(f.fake->errors.empty());
    // Preemption happened: more tokens were computed than 4 * (6 + 19).
    EXPECT_GT(f.fake->num_tokens_computed, 4 * 25);
    EXPECT_EQ(f.engine->Stats().num_kv_blocks_used, 0);
  }
}

TEST(EngineFake, RequestOutgrowingThePoolStopsWithLength) {
  Fixture f(SmallConfig(4, 3));
  ASSERT_TRUE(f.engine->AddRequest("big", Prompt(10, 1), Greedy(50)).ok());
  auto got = RunToCompletion(*f.engine);
  EXPECT_EQ(got["big"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(got["big"].token_ids.size(), 3u);  // 10 + 3 = 13 tokens > 12 slots
  EXPECT_EQ(f.engine->Stats().num_kv_blocks_used, 0);
}

TEST(EngineFake, StopTokenEosAndIgnoreEos) {
  const auto prompt = Prompt(5, 3);
  std::vector<int32_t> ref;
  {
    Fixture f(SmallConfig());
    ref = f.fake->GreedyReference(prompt, 10);
  }
  // A token that first appears at index k.
  size_t k = 3;
  while (std::find(ref.begin(), ref.begin() + k, ref[k]) != ref.begin() + k) ++k;
  {
    Fixture f(SmallConfig());
    SamplingParams p = Greedy(10);
    p.stop_token_ids = {ref[k]};
    ASSERT_TRUE(f.engine->AddRequest("a", prompt, p).ok());
    auto got = RunToCompletion(*f.engine);
    EXPECT_EQ(got["a"].token_ids, std::vector<int32_t>(ref.begin(), ref.begin() + k + 1));
    EXPECT_EQ(got["a"].finish_reason, FinishReason::kStop);
  }
  {
    Fixture f(SmallConfig(), {ref[k]});
    ASSERT_TRUE(f.engine->AddRequest("eos", prompt, Greedy(10)).ok());
    SamplingParams p = Greedy(10);
    p.ignore_eos = true;
    ASSERT_TRUE(f.engine->AddRequest("ignore", prompt, p).ok());
    auto got = RunToCompletion(*f.engine);
    EXPECT_EQ(got["eos"].token_ids.size(), k + 1);
    EXPECT_EQ(got["eos"].finish_reason, FinishReason::kStop);
    EXPECT_EQ(got["ignore"].token_ids, ref);
    EXPECT_EQ(got["ignore"].finish_reason, FinishReason::kLength);
  }
}

TEST(EngineFake, MaxModelLenEndsGenerationWithLength) {
  EngineConfig c = SmallConfig();
  c.max_model_len = 12;
  Fixture f(c);
  ASSERT_TRUE(f.engine->AddRequest("a", Prompt(10, 1), Greedy(10)).ok());
  ASSERT_TRUE(f.engine->AddRequest("full", Prompt(12, 2), Greedy(10)).ok());
  auto got = RunToCompletion(*f.engine);
  EXPECT_EQ(got["a"].token_ids.size(), 2u);
  EXPECT_EQ(got["a"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(got["full"].token_ids.size(), 1u);
  Status s = f.engine->AddRequest("long", Prompt(13, 1), Greedy(1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("13"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("12"), std::string::npos) << s.message();
}

TEST(EngineFake, AddRequestValidation) {
  Fixture f(SmallConfig(4, 4));
  auto code = [&](const std::string& id, std::vector<int32_t> prompt, SamplingParams p) {
    return f.engine->AddRequest(id, std::move(prompt), p).code();
  };
  EXPECT_EQ(code("e", {}, Greedy(1)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("v", {1, 512}, Greedy(1)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("n", {1, -1}, Greedy(1)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code("m", {1}, Greedy(0)), StatusCode::kInvalidArgument);
  SamplingParams p = Greedy(1);
  p.temperature = -1;
  EXPECT_EQ(code("t", {1}, p), StatusCode::kInvalidArgument);
  p = Greedy(1);
  p.top_p = 0;
  EXPECT_EQ(code("p", {1}, p), StatusCode::kInvalidArgument);
  p = Greedy(1);
  p.stop = {"x"};  // no tokenizer
  EXPECT_EQ(code("s", {1}, p), StatusCode::kInvalidArgument);
  p = Greedy(1);
  p.logprobs = 21;
  EXPECT_EQ(code("l", {1}, p), StatusCode::kInvalidArgument);
  // 17 tokens need 5 blocks of 4; the pool has 4.
  Status s = f.engine->AddRequest("big", Prompt(17, 1), Greedy(1));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);  // it never fits: not worth retrying
  EXPECT_NE(s.message().find("17"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("4 blocks"), std::string::npos) << s.message();
  EXPECT_TRUE(f.engine->AddRequest("ok", Prompt(16, 1), Greedy(1)).ok());
  EXPECT_EQ(code("ok", {1}, Greedy(1)), StatusCode::kInvalidArgument);  // duplicate
  RunToCompletion(*f.engine);
  EXPECT_TRUE(f.engine->AddRequest("ok", {1}, Greedy(1)).ok());  // finished ids can be reused
  RunToCompletion(*f.engine);
}

TEST(EngineFake, CreateErrors) {
  EngineConfig c;
  c.kv_cache_bytes = 100;  // FakeModelRunner blocks are 1024 * block_size bytes
  auto e = Engine::Create(std::make_unique<FakeModelRunner>(), nullptr, c);
  EXPECT_EQ(e.status().code(), StatusCode::kResourceExhausted);
  c = EngineConfig{};
  c.kv_cache_bytes = 1024 * 16 * 10;
  e = Engine::Create(std::make_unique<FakeModelRunner>(), nullptr, c);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->Stats().num_kv_blocks_total, 10);
  c.max_model_len = 5000;  // more than max_position_embeddings 4096
  EXPECT_EQ(Engine::Create(std::make_unique<FakeModelRunner>(), nullptr, c).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_FALSE(Engine::Create(nullptr, nullptr, EngineConfig{}).ok());
}

TEST(EngineFake, AbortFreesBlocksAndReportsAbort) {
  Fixture f(SmallConfig(4, 64, 8));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(f.engine->AddRequest("a" + std::to_string(i), Prompt(20, i), Greedy(30)).ok());
  }
  f.engine->Step();  // a0 partly prefilled
  f.engine->AbortRequest("a0");  // running
  f.engine->AbortRequest("a2");  // waiting
  f.engine->AbortRequest("nope");
  auto got = RunToCompletion(*f.engine);
  EXPECT_EQ(got["a0"].finish_reason, FinishReason::kAbort);
  EXPECT_EQ(got["a2"].finish_reason, FinishReason::kAbort);
  EXPECT_EQ(got["a1"].finish_reason, FinishReason::kLength);
  EXPECT_EQ(got["a1"].token_ids, f.fake->GreedyReference(Prompt(20, 1), 30));
  EXPECT_EQ(f.engine->Stats().num_kv_blocks_used, 0);
  EXPECT_EQ(f.engine->Stats().num_running, 0);
  EXPECT_EQ(f.engine->Stats().num_waiting, 0);
}

TEST(EngineFake, ForwardFailureEndsBatchWithError) {
  Fixture f(SmallConfig());
  ASSERT_TRUE(f.engine->AddRequest("a", Prompt(5, 1), Greedy(5)).ok());
  ASSERT_TRUE(f.engine->AddRequest("b", Prompt(6, 2), Greedy(5)).ok());
  f.fake->fail_next_forward = true;
  auto got = RunToCompletion(*f.engine);
  EXPECT_EQ(got["a"].finish_reason, FinishReason::kError);
  EXPECT_NE(got["a"].error.find("injected"), std::string::npos);
  EXPECT_EQ(got["b"].finish_reason, FinishReason::kError);
  EXPECT_EQ(f.engine->Stats().num_kv_blocks_used, 0);
}

TEST(EngineFake, SeededSamplingSameAloneAndBatched) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.seed = 1234;
  p.max_tokens = 16;
  const auto prompt = Prompt(9, 5);
  std::vector<int32_t> alone;
  {
    Fixture f(SmallConfig());
    ASSERT_TRUE(f.engine->AddRequest("seeded", prompt, p).ok());
    alone = RunToCompletion(*f.engine)["seeded"].token_ids;
  }
  Fixture f(SmallConfig(4, 256, 7));
  SamplingParams unseeded = p;
  unseeded.seed.reset();
  ASSERT_TRUE(f.engine->AddRequest("u0", Prompt(4, 1), unseeded).ok());
  ASSERT_TRUE(f.engine->AddRequest("seeded", prompt, p).ok());
  ASSERT_TRUE(f.engine->AddRequest("u1", Prompt(12, 2), unseeded).ok());
  auto got = RunToCompletion(*f.engine);
  EXPECT_EQ(got["seeded"].token_ids, alone);
  EXPECT_EQ(alone.size(), 16u);
  // Sampling really happened: not the greedy sequence.
  EXPECT_NE(alone, f.fake->GreedyReference(prompt, 16));
}

TEST(EngineFake, LogprobsFromRawLogits) {
  Fixture f(SmallConfig());
  SamplingParams p = Greedy(4);
  p.logprobs = 3;
  p.repetition_penalty = 1.5f;  // penalties must not change the reported logprobs
  const auto prompt = Prompt(6, 2);
  ASSERT_TRUE(f.engine->AddRequest("a", prompt, p).ok());
  auto got = RunToCompletion(*f.engine);
  const Collected& c = got["a"];
  ASSERT_EQ(c.logprobs.size(), c.token_ids.size());
  std::vector<int32_t> history = prompt;
  for (size_t i = 0; i < c.token_ids.size(); ++i) {
    auto l = f.fake->ReferenceLogits(history);
    double z = 0;
    float mx = *std::max_element(l.begin(), l.end());
    for (float x : l) z += std::exp(x - mx);
    const double lz = mx + std::log(z);
    EXPECT_EQ(c.logprobs[i].token_id, c.token_ids[i]);
    EXPECT_NEAR(c.logprobs[i].logprob, l[c.token_ids[i]] - lz, 1e-4);
    ASSERT_EQ(c.logprobs[i].top.size(), 3u);
    EXPECT_EQ(c.logprobs[i].top[0].first,
              std::max_element(l.begin(), l.end()) - l.begin());
    EXPECT_GE(c.logprobs[i].top[0].second, c.logprobs[i].top[1].second);
    history.push_back(c.token_ids[i]);
  }
}

// Engine::SetStepTimeline: each Step that runs a forward pass adds its four phases once and counts
// itself; the phases add up to no more than the Step calls' own wall time; detached, nothing more
// is added. (The fake runner records no phases of its own.)
TEST(EngineFake, StepTimelineCountsForwardStepsAndTheirPhases) {
  Fixture f(SmallConfig());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(f.engine->AddRequest("t" + std::to_string(i), Prompt(9 + i, i), Greedy(5)).ok());
  }
  StepTimeline timeline;
  f.engine->SetStepTimeline(&timeline);
  double wall_ms = 0;
  while (f.engine->HasUnfinishedRequests()) {
    const auto t0 = std::chrono::steady_clock::now();
    f.engine->Step();
    wall_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  EXPECT_EQ(timeline.steps, f.fake->num_steps);
  ASSERT_EQ(timeline.host.size(), 4u);
  const char* names[] = {"schedule", "batch", "execute", "post"};
  double sum = 0;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(timeline.host[i].name, names[i]);
    EXPECT_EQ(timeline.host[i].count, timeline.steps) << names[i];
    EXPECT_GE(timeline.host[i].ms, 0.0);
    sum += timeline.host[i].ms;
  }
  EXPECT_LE(sum, wall_ms);
  EXPECT_TRUE(timeline.device.empty());

  f.engine->SetStepTimeline(nullptr);
  const int64_t steps = timeline.steps;
  ASSERT_TRUE(f.engine->AddRequest("after", Prompt(7, 9), Greedy(3)).ok());
  RunToCompletion(*f.engine);
  EXPECT_EQ(timeline.steps, steps);
  EXPECT_EQ(timeline.host[0].count, steps);
}

}  // namespace
}  // namespace tandem
