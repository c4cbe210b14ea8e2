// Tokenizing a rendered chat prompt: the template's control tokens are parsed as special tokens,
// the message content inside it (RenderedChat::literal_ranges) is plain text.
#pragma once

#include <cstdint>
#include <vector>

#include "chat/template.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

std::vector<int32_t> EncodeChatPrompt(const Tokenizer& tokenizer, const RenderedChat& rendered);

}  // namespace tandem
