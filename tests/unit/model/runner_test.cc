// CPU ModelRunner on the real tiny-qwen3: batching, logits modes, input validation.
#include <cmath>

#include <gtest/gtest.h>

#include "runner_test_util.h"

namespace tandem::testing {
namespace {

SequenceSlice Slice(const std::vector<int32_t>& ids, int start, int len,
                    const std::vector<int32_t>& table,
                    SequenceSlice::Logits mode = SequenceSlice::Logits::kLast) {
  SequenceSlice s;
  s.token_ids = std::span<const int32_t>(ids.data() + start, len);
  s.start_pos = start;
  s.block_table = table;
  s.logits = mode;
  return s;
}

double MaxAbsDiff(const float* a, const float* b, int n) {
  double m = 0.0;
  for (int i = 0; i < n; ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

// Three sequences in one Forward per step (prefill of C while A and B decode, then all decode)
// give the logits each gets alone.
TEST(CpuRunnerTest, BatchedEqualsAlone) {
  ModelRunner* runner = TinyQwen3();
  ASSERT_NE(runner, nullptr);
  const nlohmann::json golden = LoadGolden("tiny-qwen3.json");
  const int vocab = runner->config().vocab_size;
  constexpr int kSteps = 6;
  constexpr int kBlock = 7;
  std::vector<std::vector<int32_t>> prompts;
  for (int c : {0, 6, 2}) prompts.push_back(Ids(golden["generation"][c]["prompt_ids"]));

  // Alone: logits after the prompt and after each of kSteps - 1 decode steps.
  std::vector<GreedyResult> alone;
  for (const auto& p : prompts) {
    alone.push_back(Greedy(runner, p, kSteps, kBlock, 0, /*keep_all=*/true));
    ASSERT_EQ(alone.back().step_logits.size(), static_cast<size_t>(kSteps));
  }

  // Batched: A and B prefill in step 0; C prefills in step 1 while A and B decode.
  constexpr int kBlocksPerSeq = 8;  // 56 tokens each
  ASSERT_TRUE(runner->AllocateKVCache(3 * kBlocksPerSeq, kBlock).ok());
  std::vector<std::vector<int32_t>> tables(3), seqs = prompts;
  for (int s = 0; s < 3; ++s) tables[s] = MakeBlockTable(kBlocksPerSeq, s, 3);  // interleaved
  std::vector<int> num_steps(3, 0);  // logits rows seen so far per seq
  std::vector<int> computed(3, 0);   // tokens in the cache per seq
  double max_diff = 0.0;
  for (int step = 0; step < kSteps + 1; ++step) {
    ForwardBatch batch;
    std::vector<int> order;
    for (int s = 0; s < 3; ++s) {
      if (s == 2 && step == 0) continue;
      if (num_steps[s] >= kSteps) continue;
      const int len = static_cast<int>(seqs[s].size()) - computed[s];
      batch.seqs.push_back(Slice(seqs[s], computed[s], len, tables[s]));
      order.push_back(s);
    }
    if (order.empty()) break;
    std::vector<float> logits;
    ASSERT_TRUE(runner->Forward(batch, &logits).ok());
    ASSERT_EQ(logits.size(), order.size() * vocab);
    for (size_t r = 0; r < order.size(); ++r) {
      const int s = order[r];
      const float* row = logits.data() + r * vocab;
      const std::vector<float>& want = alone[s].step_logits[num_steps[s]];
      EXPECT_EQ(ArgmaxRow(row, vocab), ArgmaxRow(want.data(), vocab)) << "seq " << s;
      const double diff = MaxAbsDiff(row, want.data(), vocab);
      max_diff = std::max(max_diff, diff);
      EXPECT_LT(diff, 1e-4) << "seq " << s << " step " << num_steps[s];
      computed[s] = static_cast<int>(seqs[s].size());
      seqs[s].push_back(alone[s].ids[num_steps[s]]);  // the token alone decoding chose
      ++num_steps[s];
    }
  }
  for (int s = 0; s < 3; ++s) EXPECT_EQ(num_steps[s], kSteps);
  std::printf("[batched] max |logit diff| vs alone = %.3g\n", max_diff);
}

// kAll returns one row per token; its last row equals kLast's row; kNone returns nothing.
TEST(CpuRunnerTest, LogitsModes) {
  ModelRunner* runner = TinyQwen3();
  ASSERT_NE(runner, nullptr);
  const int vocab = runner->config().vocab_size;
  const std::vector<int32_t> a = {785, 21234, 1053, 566}, b = {40, 1513, 944};
  const std::vector<int32_t> ta = {0}, tb = {1};
  ASSERT_TRUE(runner->AllocateKVCache(2, 16).ok());
  ForwardBatch batch;
  batch.seqs.push_back(Slice(a, 0, 4, ta, SequenceSlice::Logits::kAll));
  batch.seqs.push_back(Slice(b, 0, 3, tb, SequenceSlice::Logits::kNone));
  std::vector<float> all;
  ASSERT_TRUE(runner->Forward(batch, &all).ok());
  ASSERT_EQ(all.size(), 4u * vocab);
  batch.seqs.clear();
  batch.seqs.push_back(Slice(b, 0, 3, tb, SequenceSlice::Logits::kNone));
  batch.seqs.push_back(Slice(a, 0, 4, ta, SequenceSlice::Logits::kLast));
  std::vector<float> last;
  ASSERT_TRUE(runner->Forward(batch, &last).ok());
  ASSERT_EQ(last.size(), static_cast<size_t>(vocab));
  EXPECT_LT(MaxAbsDiff(last.data(), all.data() + 3 * vocab, vocab), 1e-4);
  batch.seqs.resize(1);
  ASSERT_TRUE(runner->Forward(batch, &last).ok());
  EXPECT_TRUE(last.empty());
  ForwardBatch empty;
  ASSERT_TRUE(runner->Forward(empty, &last).ok());
  EXPECT_TRUE(last.empty());
}

// A prompt prefilled in one step of many tokens (the token-wise path: blocks of tokens through whole
// layers) and in steps of 8 tokens (one operation at a time across the pool) gives the same logits
// for every row up to the order of attention's sums, and the same greedy token everywhere.
TEST(CpuRunnerTest, TokenWisePathEqualsOperationPath) {
  ModelRunner* runner = TinyQwen3();
  ASSERT_NE(runner, nullptr);
  const int vocab = runner->config().vocab_size;
  const nlohmann::json golden = LoadGolden("tiny-qwen3-long.json");
  const std::vector<int32_t> all_ids = Ids(golden["generation_long"][0]["prompt_ids"]);
  constexpr int kLen = 200, kBlock = 16, kSmall = 8;
  const std::vector<int32_t> ids(all_ids.begin(), all_ids.begin() + kLen);
  const std::vector<int32_t> table = MakeBlockTable(kLen / kBlock + 1, 0, 1);
  ASSERT_TRUE(runner->AllocateKVCache(kLen / kBlock + 1, kBlock).ok());
  ForwardBatch one;
  one.seqs.push_back(Slice(ids, 0, kLen, table, SequenceSlice::Logits::kAll));
  std::vector<float> big, small, part;
  ASSERT_TRUE(runner->Forward(one, &big).ok());
  ASSERT_EQ(big.size(), static_cast<size_t>(kLen) * vocab);
  for (int start = 0; start < kLen; start += kSmall) {
    ForwardBatch step;
    step.seqs.push_back(Slice(ids, start, kSmall, table, SequenceSlice::Logits::kAll));
    ASSERT_TRUE(runner->Forward(step, &part).ok());
    small.insert(small.end(), part.begin(), part.end());
  }
  ASSERT_EQ(small.size(), big.size());
  double max_diff = 0.0;
  for (int r = 0; r < kLen; ++r) {
    const float* a = big.data() + static_cast<size_t>(r) * vocab;
    const float* b = small.data() + static_cast<size_t>(r) * vocab;
    max_diff = std::max(max_diff, MaxAbsDiff(a, b, vocab));
    EXPECT_EQ(ArgmaxRow(a, vocab), ArgmaxRow(b, vocab)) << "row " << r;
  }
  EXPECT_LT(max_diff, 1e-3);
  std::printf("[cpu runner] %d tokens in one step vs steps of %d: max |logit diff| %.3g\n", kLen, kSmall, max_diff);
}

TEST(CpuRunnerTest, InvalidInputsAreErrors) {
  ModelRunner* runner = TinyQwen3();
  ASSERT_NE(runner, nullptr);
  const ModelConfig& c = runner->config();
  EXPECT_EQ(runner->KVBlockBytes(16), 6u * 2 * 16 * 2 * 64 * 4);
  EXPECT_EQ(runner->AllocateKVCache(0, 16).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(runner->AllocateKVCache(1 << 30, 1 << 20).code(), StatusCode::kResourceExhausted);
  std::vector<float> logits;
  const std::vector<int32_t> ok_ids = {1, 2, 3};
  const std::vector<int32_t> table = {0};
  ForwardBatch batch;
  batch.seqs.push_back(Slice(ok_ids, 0, 3, table));
  // A failed allocation leaves no pool: Forward is refused, not a crash.
  EXPECT_EQ(runner->Forward(batch, &logits).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(runner->AllocateKVCache(4, 2).ok());

  const std::vector<int32_t> table0 = {0}, table1 = {1}, table7 = {7};
  auto expect_invalid = [&](const SequenceSlice& s, const char* what) {
    ForwardBatch b;
    b.seqs.push_back(Slice(ok_ids, 0, 1, table0));  // a valid slice first
    b.seqs.push_back(s);
    Status st = runner->Forward(b, &logits);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << what << ": " << st.ToString();
  };
  const std::vector<int32_t> bad_id = {1, c.vocab_size}, neg_id = {-1};
  const std::vector<int32_t> two = {1, 2}, big_table = {0, 1};
  expect_invalid(Slice(bad_id, 0, 2, big_table), "token id == vocab");
  expect_invalid(Slice(neg_id, 0, 1, big_table), "negative token id");
  expect_invalid(Slice(ok_ids, 0, 3, table1), "block table too short");
  expect_invalid(Slice(two, 0, 2, table7), "block id outside the pool");
  expect_invalid(Slice(two, 0, 0, big_table), "empty slice");
  SequenceSlice far = Slice(two, 0, 1, big_table);
  far.start_pos = c.max_position_embeddings;
  std::vector<int32_t> long_table(c.max_position_embeddings / 2 + 1, 2);
  far.block_table = long_table;
  expect_invalid(far, "position beyond max_position_embeddings");
  SequenceSlice negative = Slice(two, 0, 1, big_table);
  negative.start_pos = -1;
  expect_invalid(negative, "negative start_pos");
}

}  // namespace
}  // namespace tandem::testing
