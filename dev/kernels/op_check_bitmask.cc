// cuda_op_check: the token bitmask of structured outputs (kernels/cuda/token_bitmask.h) against
// its CPU reference cpu::ApplyTokenBitmask, then the GPU pick (SampleRows) on the masked rows against
// cpu::SampleWithUniform on the same rows: every pick an allowed token and equal to the host's.
#include <cmath>
#include <random>
#include <span>

#include "kernels/cpu/sample.h"
#include "kernels/cuda/sampling_filter.h"
#include "kernels/cuda/token_bitmask.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

// rows x vocab logits, 3 masks of mask_words words (shorter than the vocabulary when
// mask_words * 32 < vocab: the tail is disallowed), row r masked by mask r % 3 unless r % 4 == 3.
void TokenBitmaskCase(int rows, int vocab, int mask_words) {
  std::mt19937_64 rng(NextSeed());
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(rows) * vocab);
  for (float& x : logits) x = normal(rng);
  constexpr int kMasks = 3;
  std::vector<uint32_t> masks(static_cast<size_t>(kMasks) * mask_words, 0);
  for (int m = 0; m < kMasks; ++m) {
    const int every = m == 0 ? 2 : m == 1 ? 17 : 997;  // dense, sparse, a few tokens
    for (int t = 0; t < std::min(vocab, 32 * mask_words); ++t) {
      if ((t * 7919 + m) % every == 0) masks[m * mask_words + t / 32] |= 1u << (t % 32);
    }
  }
  std::vector<int32_t> mask_of_row(rows);
  for (int r = 0; r < rows; ++r) mask_of_row[r] = r % 4 == 3 ? -1 : r % kMasks;
  std::vector<float> want = logits;  // the CPU reference, row by row
  for (int r = 0; r < rows; ++r) {
    if (mask_of_row[r] < 0) continue;
    cpu::ApplyTokenBitmask(std::span<float>(want).subspan(static_cast<size_t>(r) * vocab, vocab),
                           std::span<const uint32_t>(masks).subspan(
                               static_cast<size_t>(mask_of_row[r]) * mask_words, mask_words));
  }
  DevBuf<float> d_logits(logits.size());
  DevBuf<uint32_t> d_masks(masks.size());
  DevBuf<int32_t> d_rows(rows), d_tokens(rows), d_status(rows);
  d_logits.Upload(logits);
  d_masks.Upload(masks);
  d_rows.Upload(mask_of_row);
  OC_OK(cuda::ApplyTokenBitmask(d_logits.get(), vocab, rows, vocab, d_masks.get(), mask_words,
                                d_rows.get(), nullptr));
  const std::vector<float> got = d_logits.Download();
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    differ += !(got[i] == want[i] || (std::isinf(got[i]) && std::isinf(want[i]) && got[i] < 0 && want[i] < 0));
  }
  Row row{"token_bitmask", "rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) +
                               " words " + std::to_string(mask_words)};
  row.pass = differ == 0;
  row.note = std::to_string(differ) + " logits differ from the host-masked ones";
  // The pick on the masked rows: greedy on even rows, temperature 1 (and top-k 50 on every third)
  // on odd ones, the host's rule on the same rows and draws.
  std::vector<cuda::SampleRowSpec> specs(rows);
  for (int r = 0; r < rows; ++r) {
    if (r % 2 == 1) specs[r].temperature = 1.0f;
    if (r % 3 == 0) specs[r].top_k = 50;
    specs[r].u = static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
  }
  DevBuf<cuda::SampleRowSpec> d_specs(rows);
  OC_CUDA(cudaMemcpy(d_specs.get(), specs.data(), rows * sizeof(specs[0]), cudaMemcpyHostToDevice));
  OC_OK(cuda::SampleRows(d_logits.get(), vocab, rows, vocab, d_specs.get(), d_tokens.get(),
                         d_status.get(), nullptr));
  const std::vector<int32_t> tokens = d_tokens.Download(), status = d_status.Download();
  int wrong = 0, disallowed = 0, host = 0;
  for (int r = 0; r < rows; ++r) {
    if (status[r] != cuda::kSamplePicked) {
      ++host;
      continue;
    }
    std::span<const float> w(want.data() + static_cast<size_t>(r) * vocab, vocab);
    cpu::SampleSpec s;
    s.temperature = specs[r].temperature;
    s.top_k = specs[r].top_k;
    wrong += tokens[r] != cpu::SampleWithUniform(w, s, specs[r].u);
    disallowed += std::isinf(w[tokens[r]]);
  }
  row.pass = row.pass && wrong == 0 && disallowed == 0;
  row.note += "; picks: " + std::to_string(wrong) + " differ from the host's, " +
              std::to_string(disallowed) + " disallowed, " + std::to_string(host) + " left to the host";
  Record(row);
}

}  // namespace

void CheckTokenBitmask() {
  TokenBitmaskCase(24, 151936, (151669 + 31) / 32);  // Qwen3: the tokenizer's ids, the model's rows
  TokenBitmaskCase(5, 97, 4);                         // a mask longer than the vocabulary
  TokenBitmaskCase(7, 1000, 10);                      // one much shorter
}

}  // namespace tandem::opcheck
