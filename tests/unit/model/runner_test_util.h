// Helpers for ModelRunner tests: golden files, greedy decoding over a simple block table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "model/model_runner.h"

namespace tandem::testing {

inline constexpr int32_t kImEnd = 151645;     // <|im_end|>
inline constexpr int32_t kEndOfText = 151643;  // <|endoftext|>

inline nlohmann::json LoadGolden(const std::string& name) {
  auto j = ReadJsonFile(std::string(TANDEM_GOLDEN_DIR) + "/" + name);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  return j.ok() ? *j : nlohmann::json();
}

// The real model, loaded once per test binary.
inline ModelRunner* TinyQwen3() {
  static std::unique_ptr<ModelRunner> runner = [] {
    auto r = LoadCpuModelRunner(DefaultModelDir());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }();
  return runner.get();
}

// log(sum(exp(row))) in double.
inline double LogSumExp(const float* row, int n) {
  float max_v = row[0];
  for (int i = 1; i < n; ++i) max_v = std::max(max_v, row[i]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - max_v);
  return max_v + std::log(sum);
}

inline int32_t ArgmaxRow(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// A block table of `num_blocks` ids: stride-permuted so that consecutive positions land in
// non-consecutive blocks (ids first + k * stride).
inline std::vector<int32_t> MakeBlockTable(int num_blocks, int first = 0, int stride = 1) {
  std::vector<int32_t> table(num_blocks);
  for (int k = 0; k < num_blocks; ++k) table[k] = first + k * stride;
  return table;
}

struct GreedyResult {
  std::vector<int32_t> ids;               // generated ids (ends with EOS when it stopped there)
  std::vector<float> first_logits;        // [vocab] logits after the prompt
  std::vector<std::vector<float>> step_logits;  // every step's logits (when keep_all)
};

// Prefills `prompt` in chunks of `chunk` tokens (0: all at once), then decodes greedily until
// `max_new` tokens or an EOS. The runner's KV cache is (re)allocated with `block_size`.
inline GreedyResult Greedy(ModelRunner* runner, const std::vector<int32_t>& prompt, int max_new,
                           int block_size, int chunk = 0, bool keep_all = false) {
  GreedyResult out;
  const int vocab = runner->config().vocab_size;
  const int total = static_cast<int>(prompt.size()) + max_new;
  const int num_blocks = (total + block_size - 1) / block_size;
  // Reverse order: position 0 lives in the last block of the pool.
  std::vector<int32_t> table(num_blocks);
  for (int k = 0; k < num_blocks; ++k) table[k] = num_blocks - 1 - k;
  EXPECT_TRUE(runner->AllocateKVCache(num_blocks, block_size).ok());
  std::vector<float> logits;
  const int n = static_cast<int>(prompt.size());
  if (chunk <= 0) chunk = n;
  for (int start = 0; start < n; start += chunk) {
    const int len = std::min(chunk, n - start);
    ForwardBatch batch;
    SequenceSlice s;
    s.token_ids = std::span<const int32_t>(prompt.data() + start, len);
    s.start_pos = start;
    s.block_table = table;
    s.logits = start + len == n ? SequenceSlice::Logits::kLast : SequenceSlice::Logits::kNone;
    batch.seqs.push_back(s);
    Status st = runner->Forward(batch, &logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return out;
  }
  EXPECT_EQ(logits.size(), static_cast<size_t>(vocab));
  out.first_logits = logits;
  int32_t pos = n;
  for (int step = 0; step < max_new; ++step) {
    if (keep_all) out.step_logits.push_back(logits);
    const int32_t next = ArgmaxRow(logits.data(), vocab);
    out.ids.push_back(next);
    if (next == kImEnd || next == kEndOfText || step + 1 == max_new) break;
    ForwardBatch batch;
    SequenceSlice s;
    s.token_ids = std::span<const int32_t>(&out.ids.back(), 1);
    s.start_pos = pos++;
    s.block_table = table;
    batch.seqs.push_back(s);
    Status st = runner->Forward(batch, &logits);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (!st.ok()) return out;
  }
  return out;
}

inline std::vector<int32_t> Ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// How a runner's greedy decoding agrees with a golden file's "generation" cases (for runners that
// only approximate the golden's model, e.g. FP8 weights or KV): cases whose first token agrees,
// cases identical to the end, tokens before each case's first divergence over all golden tokens,
// and the largest error of the golden's top-5 first-token logprobs.
struct GoldenAgreement {
  int cases = 0, first_agree = 0, identical = 0, matched = 0, total = 0;
  double max_top5_err = 0;
  void Print(const char* label) const {
    std::printf("[%s] first token %d/%d, identical %d/%d, tokens before the first divergence %d/%d (%.0f%%), "
                "max |top-5 logprob error| %.3f\n", label, first_agree, cases, identical, cases, matched, total,
                100.0 * matched / total, max_top5_err);
  }
};

inline GoldenAgreement AgreementWithGolden(ModelRunner* runner, const nlohmann::json& golden) {
  GoldenAgreement a;
  const int vocab = runner->config().vocab_size;
  for (const auto& g : golden["generation"]) {
    const std::vector<int32_t> want = Ids(g["greedy_ids"]);
    GreedyResult r = Greedy(runner, Ids(g["prompt_ids"]), static_cast<int>(want.size()), 16);
    size_t k = 0;
    while (k < want.size() && k < r.ids.size() && r.ids[k] == want[k]) ++k;
    a.matched += static_cast<int>(k);
    a.total += static_cast<int>(want.size());
    a.identical += k == want.size();
    a.first_agree += k > 0;
    const double lse = LogSumExp(r.first_logits.data(), vocab);
    for (const auto& e : g["top5_first"]) {
      a.max_top5_err = std::max(a.max_top5_err, std::abs(r.first_logits[e[0].get<int>()] - lse - e[1].get<double>()));
    }
    ++a.cases;
  }
  return a;
}

}  // namespace tandem::testing
