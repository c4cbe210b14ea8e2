#include "chat/prompt.h"

namespace tandem {

std::vector<int32_t> EncodeChatPrompt(const Tokenizer& tokenizer, const RenderedChat& rendered) {
  EncodeOptions options;
  options.parse_special = true;
  options.literal_ranges = rendered.literal_ranges;
  return tokenizer.Encode(rendered.text, options);
}

}  // namespace tandem
