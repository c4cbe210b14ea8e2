// The CPU runner against Hugging Face's own outputs for tiny-qwen3 (tests/golden/).
#include <cmath>
#include <cstdio>
#include <numeric>

#include <gtest/gtest.h>

#include "runner_test_util.h"

namespace tandem::testing {
namespace {

constexpr int kMaxNew = 32;

// Checks the first step's top-5 against the golden [[id, logprob], ...]; returns the max error.
double CheckTop5(const std::vector<float>& logits, int vocab, const nlohmann::json& top5,
                 const std::string& label) {
  const double lse = LogSumExp(logits.data(), vocab);
  double max_err = 0.0;
  for (const auto& entry : top5) {
    const int id = entry[0].get<int>();
    const double want = entry[1].get<double>();
    const double got = logits[id] - lse;
    max_err = std::max(max_err, std::abs(got - want));
    EXPECT_NEAR(got, want, 1e-3) << label << " token " << id;
  }
  // The golden top-5 are the five best, in order.
  std::vector<std::pair<float, int>> ranked;
  for (int i = 0; i < vocab; ++i) ranked.push_back({-logits[i], i});
  std::partial_sort(ranked.begin(), ranked.begin() + 5, ranked.end());
  for (int k = 0; k < 5; ++k) EXPECT_EQ(ranked[k].second, top5[k][0].get<int>()) << label;
  return max_err;
}

TEST(GoldenTest, GreedyAndTop5MatchHuggingFace) {
  ModelRunner* runner = TinyQwen3();
  ASSERT_NE(runner, nullptr);
  const nlohmann::json golden = LoadGolden("tiny-qwen3.json");
  const int vocab = runner->config().vocab_size;
  double max_err = 0.0;
  int case_id = 0;
  for (const auto& g : golden["generation"]) {
    const std::vector<int32_t> prompt = Ids(g["prompt_ids"]);
    const std::vector<int32_t> want = Ids(g["greedy_ids"]);
    GreedyResult r = Greedy(runner, prompt, kMaxNew, /*block_size=*/16);
    EXPECT_EQ(r.ids, want) << "case " << case_id << ": " << g["prompt"];
    max_err = std::max(max_err, CheckTop5(r.first_logits, vocab, g["top5_first"],
                                          "case " + std::to_string(case_id)));
    ++case_id;
  }
  std::printf("[golden] %d cases, max |top-5 logprob error| = %.3g\n", case_id, max_err);
}

// Prompts prefilled in chunks, over several block sizes, give the golden ids as well.
TEST(GoldenTest, ChunkedPrefillAndBlockSizes) {
  ModelRunner* runner = TinyQwen3();
  ASSERT_NE(runner, nullptr);
  const nlohmann::json golden = LoadGolden("tiny-qwen3.json");
  const int vocab = runner->config().vocab_size;
  // (block_size, chunk): block 1 puts every position in its own block; 7 splits chunks
  // across block boundaries. Each decode step reads the 155 MB lm_head, so not the full product.
  const std::pair<int, int> combos[] = {{16, 3}, {1, 1}, {1, 4}, {7, 5}, {7, 2}};
  for (auto [block_size, chunk] : combos) {
    {
      int case_id = 0;
      for (const auto& g : golden["generation"]) {
        const std::vector<int32_t> prompt = Ids(g["prompt_ids"]);
        const std::vector<int32_t> want = Ids(g["greedy_ids"]);
        GreedyResult r = Greedy(runner, prompt, kMaxNew, block_size, chunk);
        EXPECT_EQ(r.ids, want) << "case " << case_id << " block " << block_size << " chunk "
                               << chunk;
        CheckTop5(r.first_logits, vocab, g["top5_first"], "chunked case");
        ++case_id;
      }
    }
  }
}

// Long prompts: prefill in chunks with every row's logits (teacher-forced prompt log-probs),
// then greedy decoding far out in RoPE and across many blocks.
TEST(GoldenTest, LongPromptsLogprobsAndGreedy) {
  ModelRunner* runner = TinyQwen3();
  ASSERT_NE(runner, nullptr);
  const nlohmann::json golden = LoadGolden("tiny-qwen3-long.json");
  const int vocab = runner->config().vocab_size;
  constexpr int kBlock = 16;
  constexpr int kChunk = 512;
  for (const auto& g : golden["generation_long"]) {
    const std::vector<int32_t> prompt = Ids(g["prompt_ids"]);
    const std::vector<int32_t> want = Ids(g["greedy_ids"]);
    const int n = static_cast<int>(prompt.size());
    const int num_blocks = (n + kMaxNew + kBlock - 1) / kBlock;
    std::vector<int32_t> table(num_blocks);
    for (int k = 0; k < num_blocks; ++k) table[k] = (k * 7) % num_blocks;  // a permutation when gcd(7, n) = 1
    if (std::gcd(7, num_blocks) != 1) {
      for (int k = 0; k < num_blocks; ++k) table[k] = num_blocks - 1 - k;
    }
    ASSERT_TRUE(runner->AllocateKVCache(num_blocks, kBlock).ok());

    std::vector<double> lp;  // lp[p] = log P(prompt[p + 1] | prompt[0..p])
    std::vector<float> logits, last;
    for (int start = 0; start < n; start += kChunk) {
      const int len = std::min(kChunk, n - start);
      ForwardBatch batch;
      SequenceSlice s;
      s.token_ids = std::span<const int32_t>(prompt.data() + start, len);
      s.start_pos = start;
      s.block_table = table;
      s.logits = SequenceSlice::Logits::kAll;
      batch.seqs.push_back(s);
      ASSERT_TRUE(runner->Forward(batch, &logits).ok());
      ASSERT_EQ(logits.size(), static_cast<size_t>(len) * vocab);
      for (int r = 0; r < len; ++r) {
        const float* row = logits.data() + static_cast<size_t>(r) * vocab;
        const int p = start + r;
        if (p + 1 < n) lp.push_back(row[prompt[p + 1]] - LogSumExp(row, vocab));
      }
      last.assign(logits.end() - vocab, logits.end());
    }
    double sum = 0.0;
    for (double v : lp) sum += v;
    const double want_sum = g["prompt_logprobs_sum"].get<double>();
    double max_every_err = 0.0;
    const auto& every = g["prompt_logprobs_every_256th"];
    for (size_t k = 0; k < every.size(); ++k) {
      const double err = std::abs(lp[k * 256] - every[k].get<double>());
      max_every_err = std::max(max_every_err, err);
      EXPECT_LT(err, 1e-3) << "prompt logprob #" << k * 256;
    }
    EXPECT_NEAR(sum, want_sum, 0.01) << "n=" << n;
    const double top5_err = CheckTop5(last, vocab, g["top5_first"], "long " + std::to_string(n));

    // Greedy decode from the cache.
    std::vector<int32_t> ids;
    int32_t pos = n;
    for (int step = 0; step < kMaxNew; ++step) {
      const int32_t next = ArgmaxRow(last.data(), vocab);
      ids.push_back(next);
      if (next == kImEnd || next == kEndOfText || step + 1 == kMaxNew) break;
      ForwardBatch batch;
      SequenceSlice s;
      s.token_ids = std::span<const int32_t>(&ids.back(), 1);
      s.start_pos = pos++;
      s.block_table = table;
      batch.seqs.push_back(s);
      ASSERT_TRUE(runner->Forward(batch, &last).ok());
    }
    EXPECT_EQ(ids, want) << "n=" << n;
    std::printf("[golden long n=%d] prompt logprob sum %.4f vs %.4f (err %.3g), every-256th max "
                "err %.3g, top-5 max err %.3g\n", n, sum, want_sum, std::abs(sum - want_sum),
                max_every_err, top5_err);
  }
}

}  // namespace
}  // namespace tandem::testing
