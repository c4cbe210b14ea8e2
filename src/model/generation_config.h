// The sampling defaults of a Hugging Face model's generation_config.json: temperature, top_p,
// top_k, min_p, repetition_penalty and max_new_tokens, the keys vLLM reads (`--generation-config auto`, its
// default: "the default sampling parameters are taken from the model's generation config" for
// requests that do not set them). Qwen3's: temperature 0.6, top_k 20, top_p 0.95. `do_sample` is
// not looked at (vLLM does not either); absent keys stay unset.
#pragma once

#include <optional>
#include <string>

#include "common/status.h"

namespace tandem {

struct SamplingDefaults {
  std::optional<float> temperature;         // >= 0 (0: greedy)
  std::optional<float> top_p;               // (0, 1]
  std::optional<int> top_k;                 // -1 or 0: off; else >= 1
  std::optional<float> min_p;               // [0, 1]
  std::optional<float> repetition_penalty;  // > 0
  // max_new_tokens: a cap on every request's max_tokens (vLLM takes the smallest of the request's,
  // the context left and this one); >= 1.
  std::optional<int> max_tokens;

  bool empty() const {
    return !temperature && !top_p && !top_k && !min_p && !repetition_penalty && !max_tokens;
  }
  // "temperature=0.6 top_k=20 top_p=0.95" (the set ones), or "none".
  std::string ToString() const;
};

// The defaults of DIR/generation_config.json; none when the file is absent. Errors: InvalidArgument
// (not JSON, not an object, a key that is not a number or is out of the range above), naming the
// file and the key.
Result<SamplingDefaults> LoadSamplingDefaults(const std::string& dir);

}  // namespace tandem
