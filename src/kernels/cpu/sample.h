// The CPU reference of the sampling op (the GPU twin: kernels/cuda/sampling_filter.h): penalties
// on one row of logits, then temperature -> min-p -> top-k -> top-p -> one draw with a given
// uniform u in [0, 1). engine/sampler.h wraps it with the request's generator (exactly one
// UniformDouble draw per sampled token, none when greedy).
//
// Rules (vLLM v1 order; the engine's seeded outputs depend on every detail, keep them):
//   temperature <= 0: greedy: the largest logit, the lowest id on ties; u is not used.
//   p_i = exp(double(float(logit_i - max)) * (1.0 / double(T)))   (so p_max = 1)
//   candidates: p_i > 0 and not (p_i < min_p)                      (min-p relative to p_max = 1)
//   top-k (0 < k < #candidates): the k best in (p desc, id asc) order
//   top-p (< 1): total = sum of the candidates' p; target = top_p * total; the candidates sorted by
//       (p desc, id asc) are kept up to and including the first whose cumulative sum >= target
//   draw: survivors in (p desc, id asc) order when top-p applied, else in id order; x = u * total
//       of the survivors; the first survivor whose cumulative sum > x (the last one if none).
// Sums are in double, sequential in the order named. Because p is a non-decreasing function of the
// logit, every survivor set is a prefix of the (logit desc, id asc) order; the GPU op uses that.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem::cpu {

struct SampleSpec {
  float temperature = 1.0f;  // <= 0: greedy
  float top_p = 1.0f;        // >= 1: off
  int top_k = 0;             // <= 0: off
  float min_p = 0.0f;        // <= 0: off
};

// One token id seen by a request: its logit gets the penalties.
struct PenaltyEntry {
  int32_t token_id = 0;
  int32_t output_count = 0;  // occurrences in the output (0: seen in the prompt only)
};

// The unique ids of prompt and output (first appearance order) with their output counts; ids outside
// [0, vocab_size) are skipped. O(prompt + output) time, O(vocab_size) bits of scratch.
std::vector<PenaltyEntry> MakePenaltyEntries(std::span<const int32_t> prompt_ids,
                                             std::span<const int32_t> output_ids, int vocab_size);

// Per entry, in place on logits [vocab_size] (fp32, no fused multiply-add):
//   repetition r != 1: l = l > 0 ? l / r : l * r
//   frequency f, presence q, output_count c > 0: l = l - (float(c) * f + q)
void ApplyPenaltyEntries(std::span<float> logits, std::span<const PenaltyEntry> entries,
                         float repetition_penalty, float frequency_penalty, float presence_penalty);

// The pick (rules above) from logits [vocab_size] (already penalized) and u in [0, 1).
int32_t SampleWithUniform(std::span<const float> logits, const SampleSpec& spec, double u);

// Structured outputs (the GPU twin: kernels/cuda/token_bitmask.h): logits[t] = -inf unless bit
// t % 32 of allowed[t / 32] is set; ids past allowed's end are disallowed.
void ApplyTokenBitmask(std::span<float> logits, std::span<const uint32_t> allowed);

}  // namespace tandem::cpu
