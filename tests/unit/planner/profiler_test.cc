// MeasureProfile (planner/profiler.h) on the CPU engine and the bundled tiny Qwen3: every shape
// that fits is measured (positive times; the decode steps time batch x context), the shapes that
// do not fit are skipped and named, the result loads as a Profile and feeds the ReplicaPlanner.
#include <gtest/gtest.h>

#include "common/file_util.h"
#include "engine/engine.h"
#include "planner/profiler.h"
#include "planner/replica_planner.h"

namespace tandem::planner {
namespace {

std::unique_ptr<Engine> TinyEngine() {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  EngineConfig c;
  c.num_kv_blocks = 64;  // 1024 tokens
  c.max_num_seqs = 4;
  c.enable_prefix_caching = false;
  auto engine = Engine::Create(std::move(runner).value(), nullptr, c);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

TEST(Profiler, MeasuresWhatFitsAndSkipsWhatDoesNot) {
  auto engine = TinyEngine();
  ProfileSpec spec;
  spec.prompt_lens = {16, 128, 4096};  // 4096 exceeds the 1024-token pool
  spec.contexts = {64};
  spec.batches = {1, 4, 8};            // 8 exceeds max_num_seqs
  spec.repeats = 2;
  spec.decode_steps = 4;
  std::vector<std::string> skipped;
  auto p = MeasureProfile(*engine, spec, &skipped);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->prefill.size(), 2u);
  EXPECT_EQ(p->prefill[0].prompt_tokens, 16);
  EXPECT_EQ(p->prefill[1].prompt_tokens, 128);
  for (const PrefillPoint& x : p->prefill) EXPECT_GT(x.ttft_ms, 0);
  ASSERT_EQ(p->decode.size(), 2u);
  EXPECT_EQ(p->decode[1].batch, 4);
  for (const DecodePoint& x : p->decode) EXPECT_GT(x.itl_ms, 0);
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_NE(skipped[0].find("4096"), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[1].find("8 x 64"), std::string::npos) << skipped[1];
  EXPECT_FALSE(engine->HasUnfinishedRequests());
  EXPECT_EQ(engine->Stats().num_kv_blocks_used, 0);
  // It plans: one request a second of 128-token prompts fits one worker of each role.
  PlannerConfig c;
  c.ttft_ms = 10000;
  c.itl_ms = 10000;
  auto planner = ReplicaPlanner::Create(c, *p);
  ASSERT_TRUE(planner.ok()) << planner.status().ToString();
  const ReplicaDecision d = planner->Plan(LoadSample{true, 0, 1, 128, 16, 0, 0}, 0, 1, 1);
  EXPECT_EQ(d.prefill, 1);
  EXPECT_EQ(d.decode, 1);
}

TEST(Profiler, ABusyEngineOrNoFittingShapeIsRefused) {
  auto engine = TinyEngine();
  ProfileSpec spec;
  spec.prompt_lens = {100000};
  spec.contexts = {64};
  spec.batches = {1};
  EXPECT_EQ(MeasureProfile(*engine, spec, nullptr).status().code(), StatusCode::kFailedPrecondition);
  SamplingParams params;
  params.max_tokens = 4;
  ASSERT_TRUE(engine->AddRequest("busy", {100, 101, 102}, params).ok());
  spec.prompt_lens = {16};
  EXPECT_EQ(MeasureProfile(*engine, spec, nullptr).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::planner
