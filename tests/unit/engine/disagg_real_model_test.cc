// Disaggregated prefill/decode over the real CPU runner (tiny Qwen3): a decode engine and a
// prefill engine in one process, KV blocks copied between their pools. Greedy tokens equal
// Hugging Face's (golden files) for the short golden prompts and the 1500-token prompt.
#include <memory>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "disagg_test_util.h"

namespace tandem {
namespace {

using testing::DisaggCounters;
using testing::Greedy;
using testing::RunDisaggregated;

constexpr int kBlock = 16;

std::unique_ptr<Engine> MakeReal(ModelRunner** runner_out, int max_local, int budget) {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  *runner_out = runner->get();
  EngineConfig c;
  c.block_size = kBlock;
  c.num_kv_blocks = 256;
  c.max_num_batched_tokens = budget;
  c.max_local_prefill_tokens = max_local;
  auto e = Engine::Create(std::move(runner).value(), nullptr, c);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

TEST(DisaggRealModel, GoldenGreedyThroughRemotePrefill) {
  auto shorts = ReadJsonFile(std::string(TANDEM_GOLDEN_DIR) + "/tiny-qwen3.json");
  auto longs = ReadJsonFile(std::string(TANDEM_GOLDEN_DIR) + "/tiny-qwen3-long.json");
  ASSERT_TRUE(shorts.ok() && longs.ok());
  std::vector<nlohmann::json> cases((*shorts)["generation"].begin(), (*shorts)["generation"].end());
  cases.push_back((*longs)["generation_long"][0]);  // 1500 tokens

  ModelRunner *decode_runner, *prefill_runner;
  // Prompts over 8 uncached tokens go remote; the prefill side chunks by 512.
  auto decode = MakeReal(&decode_runner, /*max_local=*/8, 2048);
  auto prefill = MakeReal(&prefill_runner, 0, 512);
  int num_remote_expected = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto prompt = cases[i]["prompt_ids"].get<std::vector<int32_t>>();
    const auto& greedy = cases[i]["greedy_ids"];
    num_remote_expected += prompt.size() > 8 ? 1 : 0;
    RequestOptions remote;
    remote.allow_remote_prefill = true;
    ASSERT_TRUE(decode->AddRequest("g" + std::to_string(i), prompt,
                                   Greedy(static_cast<int>(greedy.size())), remote)
                    .ok());
  }
  DisaggCounters counters;
  auto got = RunDisaggregated(*decode, *decode_runner, *prefill, *prefill_runner, kBlock, &counters);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(got["g" + std::to_string(i)].token_ids,
              cases[i]["greedy_ids"].get<std::vector<int32_t>>())
        << "case " << i << " (" << cases[i]["prompt_ids"].size() << " prompt tokens)";
  }
  EXPECT_EQ(counters.num_transfers, num_remote_expected);
  EXPECT_GT(counters.num_transfers, 0);
  EXPECT_EQ(decode->Stats().num_kv_blocks_used, 0);
  EXPECT_EQ(prefill->Stats().num_kv_blocks_used, 0);
}

}  // namespace
}  // namespace tandem
