// The engine over the real CPU runner and the bundled tiny Qwen3, against the Hugging Face golden
// outputs (tests/golden/tiny-qwen3.json).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "engine/engine.h"
#include "engine_test_util.h"

namespace tandem {
namespace {

using testing::Collected;
using testing::Greedy;
using testing::RunToCompletion;

constexpr int32_t kImEnd = 151645;

struct GoldenCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  std::string text;
  nlohmann::json top5_first;
};

constexpr const char* kGoldenFile = TANDEM_GOLDEN_DIR "/tiny-qwen3.json";

// Why the golden cases could not be read ("" when they were).
std::string& GoldenError() {
  static std::string error;
  return error;
}

const std::vector<GoldenCase>& Golden() {
  static const std::vector<GoldenCase> cases = [] {
    std::vector<GoldenCase> out;
    auto j = ReadJsonFile(kGoldenFile);
    if (!j.ok()) {
      GoldenError() = j.status().ToString();
      return out;
    }
    for (const auto& g : (*j)["generation"]) {
      out.push_back({g["prompt_ids"].get<std::vector<int32_t>>(),
                     g["greedy_ids"].get<std::vector<int32_t>>(), g["greedy_text"].get<std::string>(),
                     g["top5_first"]});
    }
    if (out.empty()) GoldenError() = std::string(kGoldenFile) + ": no generation cases";
    return out;
  }();
  return cases;
}

// Every test reads the golden cases (several index them): without them each one fails here,
// naming the file, instead of crashing on an empty list.
class EngineRealModel : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(Golden().empty()) << GoldenError(); }
};

std::unique_ptr<Engine> MakeEngine(EngineConfig config,
                                   std::shared_ptr<const Tokenizer> tokenizer = nullptr) {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  if (!runner.ok()) return nullptr;
  auto engine = Engine::Create(std::move(runner).value(), std::move(tokenizer), config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

EngineConfig Config(int budget = 2048, int block_size = 16, int num_blocks = 512) {
  EngineConfig c;
  c.block_size = block_size;
  c.num_kv_blocks = num_blocks;
  c.max_num_batched_tokens = budget;
  return c;
}

void ExpectGolden(const std::map<std::string, Collected>& got) {
  const auto& golden = Golden();
  for (size_t i = 0; i < golden.size(); ++i) {
    const Collected& c = got.at("g" + std::to_string(i));
    EXPECT_EQ(c.token_ids, golden[i].greedy) << "case " << i;
    const bool eos = golden[i].greedy.back() == kImEnd;
    EXPECT_EQ(c.finish_reason, eos ? FinishReason::kStop : FinishReason::kLength) << "case " << i;
  }
}

void AddGolden(Engine& engine, size_t i) {
  const GoldenCase& g = Golden()[i];
  ASSERT_TRUE(engine.AddRequest("g" + std::to_string(i), g.prompt,
                                Greedy(static_cast<int>(g.greedy.size())))
                  .ok());
}

TEST_F(EngineRealModel, GoldenGreedyBatched) {
  auto engine = MakeEngine(Config());
  ASSERT_NE(engine, nullptr);
  for (size_t i = 0; i < Golden().size(); ++i) AddGolden(*engine, i);
  ExpectGolden(RunToCompletion(*engine));
  EXPECT_EQ(engine->Stats().num_kv_blocks_used, 0);
}

TEST_F(EngineRealModel, GoldenGreedyOneByOne) {
  auto engine = MakeEngine(Config());
  ASSERT_NE(engine, nullptr);
  std::map<std::string, Collected> all;
  for (size_t i = 0; i < Golden().size(); ++i) {
    AddGolden(*engine, i);
    auto got = RunToCompletion(*engine);
    all.insert(got.begin(), got.end());
  }
  ExpectGolden(all);
  EXPECT_EQ(engine->Stats().num_kv_blocks_used, 0);
}

TEST_F(EngineRealModel, GoldenGreedyChunkedPrefill) {
  for (int budget : {3, 7, 20}) {
    SCOPED_TRACE(budget);
    auto engine = MakeEngine(Config(budget, 4));
    ASSERT_NE(engine, nullptr);
    for (size_t i = 0; i < Golden().size(); ++i) AddGolden(*engine, i);
    ExpectGolden(RunToCompletion(*engine));
    EXPECT_EQ(engine->Stats().num_kv_blocks_used, 0);
  }
}

TEST_F(EngineRealModel, GoldenGreedyUnderPreemption) {
  // 24 blocks of 4 tokens: the 8 requests cannot all hold their KV at once.
  auto engine = MakeEngine(Config(64, 4, 24));
  ASSERT_NE(engine, nullptr);
  for (size_t i = 0; i < Golden().size(); ++i) AddGolden(*engine, i);
  ExpectGolden(RunToCompletion(*engine));
  EXPECT_EQ(engine->Stats().num_kv_blocks_used, 0);
}

TEST_F(EngineRealModel, FirstTokenLogprobsMatchGolden) {
  auto engine = MakeEngine(Config());
  ASSERT_NE(engine, nullptr);
  SamplingParams p = Greedy(1);
  p.logprobs = 5;
  for (size_t i = 0; i < Golden().size(); ++i) {
    ASSERT_TRUE(engine->AddRequest("g" + std::to_string(i), Golden()[i].prompt, p).ok());
  }
  auto got = RunToCompletion(*engine);
  for (size_t i = 0; i < Golden().size(); ++i) {
    const Collected& c = got["g" + std::to_string(i)];
    ASSERT_EQ(c.logprobs.size(), 1u);
    const auto& top5 = Golden()[i].top5_first;
    ASSERT_EQ(c.logprobs[0].top.size(), 5u);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(c.logprobs[0].top[k].first, top5[k][0].get<int>()) << i;
      EXPECT_NEAR(c.logprobs[0].top[k].second, top5[k][1].get<double>(), 1e-3) << i;
    }
    EXPECT_NEAR(c.logprobs[0].logprob, top5[0][1].get<double>(), 1e-3) << i;
  }
}

// Prompts of 15..49 tokens (block 16), built from the golden prompts.
std::vector<int32_t> LongPrompt(int n) {
  std::vector<int32_t> all;
  for (const GoldenCase& g : Golden()) all.insert(all.end(), g.prompt.begin(), g.prompt.end());
  return std::vector<int32_t>(all.begin(), all.begin() + n);
}

TEST_F(EngineRealModel, PrefixCacheHitsGiveIdenticalTokens) {
  auto engine = MakeEngine(Config());
  ASSERT_NE(engine, nullptr);
  for (int n : {15, 16, 17, 31, 32, 33, 48, 49}) {
    SCOPED_TRACE(n);
    SamplingParams p = Greedy(12);
    p.ignore_eos = true;
    ASSERT_TRUE(engine->AddRequest("first", LongPrompt(n), p).ok());
    auto first = RunToCompletion(*engine);
    ASSERT_TRUE(engine->AddRequest("second", LongPrompt(n), p).ok());
    auto second = RunToCompletion(*engine);
    EXPECT_EQ(first["first"].token_ids, second["second"].token_ids);
    EXPECT_EQ(second["second"].token_ids.size(), 12u);
    EXPECT_EQ(second["second"].num_cached_tokens, (n - 1) / 16 * 16);
    if (n > 16) {
      EXPECT_GT(second["second"].num_cached_tokens, 0);
    }
    EXPECT_EQ(engine->Stats().num_kv_blocks_used, 0);
  }
  // Against an engine without prefix caching.
  EngineConfig c = Config();
  c.enable_prefix_caching = false;
  auto plain = MakeEngine(c);
  ASSERT_NE(plain, nullptr);
  SamplingParams p = Greedy(12);
  p.ignore_eos = true;
  ASSERT_TRUE(plain->AddRequest("x", LongPrompt(33), p).ok());
  ASSERT_TRUE(engine->AddRequest("y", LongPrompt(33), p).ok());
  EXPECT_EQ(RunToCompletion(*plain)["x"].token_ids, RunToCompletion(*engine)["y"].token_ids);
}

TEST_F(EngineRealModel, SeededSamplingSameAloneAndBatched) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.seed = 20261130;
  p.max_tokens = 24;
  p.ignore_eos = true;
  std::vector<int32_t> alone;
  {
    auto engine = MakeEngine(Config());
    ASSERT_NE(engine, nullptr);
    ASSERT_TRUE(engine->AddRequest("seeded", Golden()[0].prompt, p).ok());
    alone = RunToCompletion(*engine)["seeded"].token_ids;
  }
  ASSERT_EQ(alone.size(), 24u);
  EXPECT_NE(alone, std::vector<int32_t>(Golden()[0].greedy.begin(), Golden()[0].greedy.begin() + 24));
  auto engine = MakeEngine(Config());
  ASSERT_NE(engine, nullptr);
  SamplingParams unseeded = p;
  unseeded.seed.reset();
  ASSERT_TRUE(engine->AddRequest("u1", Golden()[1].prompt, unseeded).ok());
  ASSERT_TRUE(engine->AddRequest("seeded", Golden()[0].prompt, p).ok());
  ASSERT_TRUE(engine->AddRequest("u2", Golden()[6].prompt, unseeded).ok());
  EXPECT_EQ(RunToCompletion(*engine)["seeded"].token_ids, alone);
}

TEST_F(EngineRealModel, Errors) {
  EngineConfig c = Config();
  c.max_model_len = 8;
  auto engine = MakeEngine(c);
  ASSERT_NE(engine, nullptr);
  Status s = engine->AddRequest("long", LongPrompt(10), Greedy(4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("10"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("8"), std::string::npos) << s.message();
  s = engine->AddRequest("bad", {785, 151936}, Greedy(4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("151936"), std::string::npos) << s.message();
  // Generation stops at max_model_len.
  ASSERT_TRUE(engine->AddRequest("ok", LongPrompt(6), Greedy(10)).ok());
  auto got = RunToCompletion(*engine);
  EXPECT_EQ(got["ok"].token_ids.size(), 2u);
  EXPECT_EQ(got["ok"].finish_reason, FinishReason::kLength);

  auto tiny = MakeEngine(Config(2048, 16, 1));
  ASSERT_NE(tiny, nullptr);
  s = tiny->AddRequest("big", LongPrompt(29), Greedy(4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_EQ(tiny->Stats().num_kv_blocks_used, 0);

  EngineConfig no_room = Config();
  no_room.num_kv_blocks = 0;
  no_room.kv_cache_bytes = 1000;
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  ASSERT_TRUE(runner.ok());
  EXPECT_EQ(Engine::Create(std::move(runner).value(), nullptr, no_room).status().code(),
            StatusCode::kResourceExhausted);
}

TEST_F(EngineRealModel, AbortedAndFinishedReturnBlocks) {
  auto engine = MakeEngine(Config(32, 4, 128));
  ASSERT_NE(engine, nullptr);
  for (size_t i = 0; i < Golden().size(); ++i) AddGolden(*engine, i);
  std::map<std::string, Collected> got;
  for (int k = 0; k < 3; ++k) testing::Absorb(got, engine->Step());
  EXPECT_GT(engine->Stats().num_kv_blocks_used, 0);
  engine->AbortRequest("g0");
  engine->AbortRequest("g7");
  got = RunToCompletion(*engine, std::move(got));
  EXPECT_EQ(got["g0"].finish_reason, FinishReason::kAbort);
  EXPECT_EQ(got["g3"].token_ids, Golden()[3].greedy);
  const EngineStats s = engine->Stats();
  EXPECT_EQ(s.num_kv_blocks_used, 0);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
}

// Text: the detokenized output equals the golden text, and stop strings cut it.
TEST_F(EngineRealModel, TextAndStopStrings) {
  auto tokenizer = Tokenizer::Load(DefaultModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  auto engine = MakeEngine(Config(), *tokenizer);
  ASSERT_NE(engine, nullptr);
  for (size_t i = 0; i < Golden().size(); ++i) AddGolden(*engine, i);
  SamplingParams p = Greedy(32);
  p.stop = {" jury had"};
  ASSERT_TRUE(engine->AddRequest("stop", Golden()[0].prompt, p).ok());
  auto got = RunToCompletion(*engine);
  for (size_t i = 0; i < Golden().size(); ++i) {
    EXPECT_EQ(got["g" + std::to_string(i)].text, Golden()[i].text) << i;
  }
  // " he had told the jury had asked ..." -> stops after " had" of " jury had".
  const Collected& c = got["stop"];
  EXPECT_EQ(c.finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.text, " he had told the");
  EXPECT_EQ(c.token_ids, std::vector<int32_t>(Golden()[0].greedy.begin(),
                                              Golden()[0].greedy.begin() + 6));
}

}  // namespace
}  // namespace tandem
