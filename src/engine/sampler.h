// Sampler: turns one row of model logits into the next token of one request.
//
// Order (vLLM v1): penalties on the raw logits -> temperature -> min-p -> top-k -> top-p -> draw.
//   repetition_penalty r (HF / vLLM): for every token id seen in prompt or output,
//       logit > 0 ? logit / r : logit * r
//   frequency_penalty f, presence_penalty q (OpenAI): for every token id with count c > 0 in the
//       output, logit -= c * f + q
//   temperature 0: greedy argmax of the penalized logits (ties: the lowest id); no random draw.
//   temperature T > 0: p = softmax(logits / T); min-p drops tokens with p < min_p * p_max; top-k
//       keeps the k most likely; top-p keeps the smallest most-likely set whose mass >= top_p
//       (of what min-p/top-k left); then one uniform draw from the request's generator picks
//       a token from the renormalized rest.
// Logprobs are log_softmax of the raw model logits (before penalties and temperature), as the
// OpenAI API reports the model's distribution.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "engine/engine.h"
#include "engine/sampling_params.h"
#include "kernels/cpu/sample.h"

namespace tandem {

// Applies the repetition / frequency / presence penalties in place. logits: [vocab_size].
void ApplyPenalties(std::span<float> logits, std::span<const int32_t> prompt_ids,
                    std::span<const int32_t> output_ids, const SamplingParams& params);

// Picks a token from (already penalized) logits: [vocab_size]. Exactly one draw from `generator`
// when temperature > 0, none when greedy: SampleTokenWithUniform with u = UniformDouble(generator).
int32_t SampleToken(std::span<const float> logits, const SamplingParams& params,
                    std::mt19937_64& generator);

// The same pick with the uniform u in [0, 1) given (kernels/cpu/sample.h states the rules; the
// GPU pick, kernels/cuda/sampling_filter.h, follows them with the same u). u unused when greedy.
int32_t SampleTokenWithUniform(std::span<const float> logits, const SamplingParams& params, double u);

// The sampling fields of params for the op (kernels/cpu/sample.h).
cpu::SampleSpec ToSampleSpec(const SamplingParams& params);

// The greedy choice: the largest logit, the lowest id on ties.
int32_t ArgMax(std::span<const float> logits);

// log_softmax(logits)[token_id] plus the top_k largest log-probabilities, best first (ties: the
// lower id first).
TokenLogprob ComputeLogprobs(std::span<const float> logits, int32_t token_id, int top_k);

// A uniform double in [0, 1) from one draw (53 bits), the same on every platform.
inline double UniformDouble(std::mt19937_64& generator) {
  return static_cast<double>(generator() >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace tandem
