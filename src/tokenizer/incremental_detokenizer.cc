#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace tandem {

IncrementalDetokenizer::IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Push(int32_t id) {
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return std::string();
  pending_ += tokenizer_->TokenBytes(id);
  // Emit everything up to a trailing incomplete character. Decisions on ill-formed bytes depend
  // only on bytes already seen, so the output is the same as decoding all bytes at once.
  std::string out;
  const size_t consumed = tok::AppendUtf8Lossy(pending_, /*final=*/false, &out);
  pending_.erase(0, consumed);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  tok::AppendUtf8Lossy(pending_, /*final=*/true, &out);
  pending_.clear();
  return out;
}

}  // namespace tandem
