// ValidateSamplingParams (sampling_params.h).
#include "engine/sampling_params.h"

#include <cmath>

namespace tandem {

Status ValidateSamplingParams(const SamplingParams& p, int vocab_size, bool have_tokenizer) {
  auto bad = [](const char* what, auto value) {
    return Err(StatusCode::kInvalidArgument, "{} is {}", what, value);
  };
  if (p.max_tokens < 1) return bad("max_tokens must be >= 1 but", p.max_tokens);
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return bad("temperature must be >= 0 but", p.temperature);
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad("top_p must be in (0, 1] but", p.top_p);
  if (p.top_k < -1) return bad("top_k must be -1, 0 (off) or >= 1 but", p.top_k);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad("min_p must be in [0, 1] but", p.min_p);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty)) {
    return bad("repetition_penalty must be > 0 but", p.repetition_penalty);
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return bad("frequency_penalty must be in [-2, 2] but", p.frequency_penalty);
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return bad("presence_penalty must be in [-2, 2] but", p.presence_penalty);
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return Err(StatusCode::kInvalidArgument, "logprobs must be in [0, {}] (or -1: none) but is {}",
               kMaxLogprobs, p.logprobs);
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return Err(StatusCode::kInvalidArgument, "stop token id {} is outside the vocabulary [0, {})",
                 id, vocab_size);
    }
  }
  for (const std::string& s : p.stop) {
    if (s.empty()) return Status(StatusCode::kInvalidArgument, "a stop string is empty");
  }
  if (!p.stop.empty() && !have_tokenizer) {
    return Status(StatusCode::kInvalidArgument, "stop strings need an engine with a tokenizer");
  }
  return Status::Ok();
}

}  // namespace tandem
