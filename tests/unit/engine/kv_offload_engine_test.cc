// The engine with a host tier for evicted prefix blocks (EngineConfig::kv_offload_host_bytes,
// kvtier/offloader.h) on the real CPU runner and the bundled tiny Qwen3: a pool small enough that
// later prompts evict an earlier prompt's cached blocks, then that prompt again. Its greedy tokens
// must equal its first run's and the same workload's without the tier (where it is recomputed),
// while with the tier its prefix comes back from host memory.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "kv_offload_test_util.h"

namespace tandem {
namespace {

using testing::Collected;
using testing::RunWaves;

constexpr int kBlock = testing::kOffloadBlock;

std::unique_ptr<Engine> MakeEngine(size_t offload_bytes, int num_blocks = 14) {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  if (!runner.ok()) return nullptr;
  EngineConfig c;
  c.block_size = kBlock;
  c.num_kv_blocks = num_blocks;
  c.kv_offload_host_bytes = offload_bytes;
  auto engine = Engine::Create(std::move(runner).value(), nullptr, c);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return engine.ok() ? std::move(engine).value() : nullptr;
}

const std::vector<std::vector<std::pair<std::string, int>>> kEvictThenReturn = {
    {{"a1", 1}}, {{"b", 2}}, {{"c", 3}}, {{"d", 4}}, {{"e", 5}}, {{"a2", 1}}};

TEST(KvOffloadEngine, AReturningPromptIsOnboardedAndGivesTheSameTokens) {
  auto off = MakeEngine(0);
  auto on = MakeEngine(64u << 20);
  ASSERT_TRUE(off && on);
  const auto got_off = RunWaves(*off, kEvictThenReturn);
  const auto got_on = RunWaves(*on, kEvictThenReturn);
  for (const auto& [id, c] : got_off) {
    ASSERT_TRUE(got_on.count(id)) << id;
    EXPECT_EQ(got_on.at(id).token_ids, c.token_ids) << id;
    EXPECT_FALSE(c.token_ids.empty()) << id;
  }
  EXPECT_EQ(got_on.at("a2").token_ids, got_on.at("a1").token_ids);
  // Without the tier a1's blocks were evicted from the pool; with it they came back.
  EXPECT_LT(got_off.at("a2").num_cached_tokens, 5 * kBlock);
  EXPECT_EQ(got_on.at("a2").num_cached_tokens, 5 * kBlock);
  const EngineStats s = on->Stats();
  EXPECT_GT(s.kv_offloaded_blocks, 0u);
  EXPECT_GE(s.kv_onboarded_blocks, static_cast<uint64_t>(5 - got_off.at("a2").num_cached_tokens / kBlock));
  EXPECT_GT(s.kv_offload_host_blocks, 0);
  EXPECT_GT(s.prefix_cache_hits, off->Stats().prefix_cache_hits);
  EXPECT_EQ(off->Stats().kv_offloaded_blocks, 0u);
  EXPECT_EQ(s.num_kv_blocks_used, 0);
}

TEST(KvOffloadEngine, TwoRequestsSharingAnOffloadedPrefixInOneStep) {
  // a2 and a3 (the same prompt) arrive together after a1's blocks left the pool: the first admitted
  // onboards them, the second finds them in the pool in the same step.
  const std::vector<std::vector<std::pair<std::string, int>>> waves = {
      {{"a1", 1}}, {{"b", 2}}, {{"c", 3}}, {{"d", 4}}, {{"e", 5}}, {{"a2", 1}, {"a3", 1}}};
  auto off = MakeEngine(0, 20);
  auto on = MakeEngine(64u << 20, 20);
  ASSERT_TRUE(off && on);
  const auto got_off = RunWaves(*off, waves);
  const auto got_on = RunWaves(*on, waves);
  for (const auto& [id, c] : got_off) EXPECT_EQ(got_on.at(id).token_ids, c.token_ids) << id;
  EXPECT_EQ(got_on.at("a2").token_ids, got_on.at("a1").token_ids);
  EXPECT_EQ(got_on.at("a3").token_ids, got_on.at("a1").token_ids);
  EXPECT_EQ(got_on.at("a3").num_cached_tokens, 5 * kBlock);
  EXPECT_GT(on->Stats().kv_onboarded_blocks, 0u);
}

TEST(KvOffloadEngine, ABudgetBelowOneBlockRunsWithoutATier) {
  // Fewer bytes than one block: the engine runs as without offload.
  auto off = MakeEngine(0);
  auto tiny = MakeEngine(1);  // below one block: no tier at all
  ASSERT_TRUE(off && tiny);
  const auto got_off = RunWaves(*off, kEvictThenReturn);
  const auto got_tiny = RunWaves(*tiny, kEvictThenReturn);
  for (const auto& [id, c] : got_off) EXPECT_EQ(got_tiny.at(id).token_ids, c.token_ids) << id;
  EXPECT_EQ(tiny->Stats().kv_offload_host_capacity_blocks, 0);
}

}  // namespace
}  // namespace tandem
