#include "engine/text_stream.h"

namespace tandem {

TextStream::TextStream(std::shared_ptr<const Tokenizer> tokenizer, const SamplingParams& params)
    : detokenizer_(std::make_unique<IncrementalDetokenizer>(std::move(tokenizer),
                                                            params.skip_special_tokens)),
      stops_(params.stop) {}

TextStream::~TextStream() = default;

StopStringMatcher::Result TextStream::Push(int32_t token_id) {
  return stops_.Push(detokenizer_->Push(token_id));
}

std::string TextStream::Finish() {
  StopStringMatcher::Result r = stops_.Push(detokenizer_->Flush());
  if (r.stopped) return r.text;
  return r.text + stops_.Flush();
}

}  // namespace tandem
