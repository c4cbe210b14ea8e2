#include "tokenizer/tokenizer.h"

namespace tandem {

std::vector<int32_t> EndOfGenerationTokenIds(const Tokenizer& tokenizer) {
  static const char* const kTexts[] = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>",
                                       "<|eom_id|>",    "<|end_of_text|>", "<|end|>",
                                       "</s>",          "<end_of_turn>"};
  std::vector<int32_t> ids;
  for (const char* text : kTexts) {
    if (auto id = tokenizer.TokenToId(text); id && tokenizer.IsSpecial(*id)) ids.push_back(*id);
  }
  return ids;
}

}  // namespace tandem
