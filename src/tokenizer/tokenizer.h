// Tokenizer: Hugging Face tokenizer.json, byte-level BPE (GPT-2 / Qwen / Llama 3 style).
//
// Source of the format and algorithm: huggingface/tokenizers (normalizers: NFC; pre_tokenizers:
// Split with a regex, ByteLevel; models: BPE with merges ranked by order; decoders: ByteLevel;
// added_tokens with special / lstrip / rstrip / normalized flags).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem {

struct EncodeOptions {
  // Parse the text of special added tokens (e.g. "<|im_end|>") as those tokens. When false, such
  // text is tokenized as ordinary text. Default false: user content must not inject control tokens.
  bool parse_special = false;
  // Byte ranges [begin, end) of `text` that are always ordinary text even when parse_special is
  // true (user content inside a rendered chat prompt). Sorted, non-overlapping.
  std::vector<std::pair<size_t, size_t>> literal_ranges;
};

class Tokenizer {
 public:
  // Loads <model_dir>/tokenizer.json. NotFound / InvalidArgument (unsupported model type,
  // normalizer or pre-tokenizer, named).
  static Result<std::shared_ptr<const Tokenizer>> Load(const std::string& model_dir);
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options) const = 0;
  std::vector<int32_t> Encode(std::string_view text, bool parse_special = false) const {
    EncodeOptions o;
    o.parse_special = parse_special;
    return Encode(text, o);
  }

  // Bytes of the concatenated tokens. Invalid UTF-8 (a cut multi-byte character) is replaced by
  // U+FFFD as HF does. Special tokens are included unless skip_special_tokens.
  virtual std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const = 0;
  // Raw bytes of one token (no UTF-8 repair); special tokens give their text.
  virtual std::string TokenBytes(int32_t id) const = 0;

  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  // One past the largest token id (model vocab + added tokens).
  virtual int32_t vocab_size() const = 0;
};

// Ids of the special tokens that end generation in chat models, found by their text as llama.cpp
// does for its end-of-generation set: <|endoftext|>, <|im_end|>, <|eot_id|>, <|eom_id|>,
// <|end_of_text|>, <|end|>, </s>, <end_of_turn>. Only those present (as special tokens) are returned.
std::vector<int32_t> EndOfGenerationTokenIds(const Tokenizer& tokenizer);

// Streams text for tokens one at a time: never emits half a UTF-8 character (bytes of an
// incomplete character are held until it completes) and never re-emits text. The concatenation
// of all Push() results plus Flush() equals Decode(all ids, skip_special_tokens).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens);
  // New text made complete by this token (possibly empty).
  std::string Push(int32_t id);
  // Whatever is held back (an incomplete character at the end becomes U+FFFD).
  std::string Flush();

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace tandem
