// TextStream: the detokenized text of one request's output, with stop strings applied
// (IncrementalDetokenizer + StopStringMatcher). The only engine file that needs the tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/sampling_params.h"
#include "engine/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

class TextStream {
 public:
  TextStream(std::shared_ptr<const Tokenizer> tokenizer, const SamplingParams& params);
  ~TextStream();
  // Text released by one more output token; stopped when a stop string appeared.
  StopStringMatcher::Result Push(int32_t token_id);
  // The rest of the text when generation ended for another reason (stop token, length).
  std::string Finish();

 private:
  std::unique_ptr<IncrementalDetokenizer> detokenizer_;
  StopStringMatcher stops_;
};

}  // namespace tandem
