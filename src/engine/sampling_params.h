// SamplingParams: how one request picks its next tokens (the OpenAI / vLLM parameter set).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "grammar/structured_output.h"

namespace tandem {

struct SamplingParams {
  // 0 = greedy (argmax). Otherwise logits / temperature before softmax.
  float temperature = 1.0f;
  float top_p = 1.0f;  // nucleus: smallest set of tokens with cumulative probability >= top_p
  int top_k = 0;       // 0 or -1: disabled
  float min_p = 0.0f;  // drop tokens with p < min_p * p_max
  std::optional<uint64_t> seed;  // per-request generator; the same seed gives the same tokens
  // Penalties (vLLM semantics): repetition divides positive / multiplies negative logits of tokens
  // seen in prompt or output; frequency subtracts count*penalty, presence subtracts penalty once
  // (output tokens only).
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int max_tokens = 16;  // generated tokens at most
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids (unless ignore_eos)
  std::vector<std::string> stop;        // stop strings; the matched string is not in the output
  bool ignore_eos = false;
  // -1: none. k >= 0: the chosen token's log-probability plus the top-k alternatives, computed
  // from the model's distribution (log_softmax of the raw logits, before penalties/temperature).
  int logprobs = -1;
  bool skip_special_tokens = true;  // in the detokenized text
  // Structured output (grammar/structured_output.h): each token must keep the output inside the
  // grammar (the others are masked before sampling; end-of-sequence only where the grammar may
  // end), and the request stops with finish reason "stop" once the grammar is complete.
  // StructuredKind::kNone: unconstrained.
  grammar::StructuredOutputSpec structured;
  // With `structured`: the last this-many prompt tokens were generated under it already (a
  // migrated request's output so far); the grammar resumes after them.
  int structured_prefix_tokens = 0;
};

// The most top log-probabilities a request may ask for (OpenAI's top_logprobs limit).
inline constexpr int kMaxLogprobs = 20;

// InvalidArgument, naming the field and its value, for a value outside its range (max_tokens < 1,
// temperature < 0 or not finite, top_p outside (0, 1], top_k < -1, min_p outside [0, 1],
// repetition_penalty <= 0, frequency/presence penalty outside [-2, 2], logprobs outside
// [-1, kMaxLogprobs]), a stop token id outside [0, vocab_size), an empty stop string, or stop
// strings without a tokenizer.
Status ValidateSamplingParams(const SamplingParams& p, int vocab_size, bool have_tokenizer);

}  // namespace tandem
