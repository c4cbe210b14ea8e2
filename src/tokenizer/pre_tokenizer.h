// Normalizers and pre-tokenizers of tokenizer.json (huggingface/tokenizers normalizers/,
// pre_tokenizers/), the subset byte-level BPE models use:
//   normalizer:    null | NFC | NFD | NFKC | NFKD | Sequence of those (utf8proc)
//   pre_tokenizer: null | Split{Regex|String, behavior, invert} | ByteLevel{add_prefix_space,
//                  use_regex (GPT-2 pattern)} | Sequence of those
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tokenizer/regex.h"

namespace tandem::tok {

class Normalizer {
 public:
  // InvalidArgument naming an unsupported type.
  static Result<Normalizer> FromJson(const nlohmann::json& j);
  bool empty() const { return steps_.empty(); }
  // `text` is valid UTF-8.
  std::string Normalize(std::string_view text) const;

 private:
  std::vector<int> steps_;  // utf8proc option sets, applied in order
};

class PreTokenizer {
 public:
  static Result<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& j);
  // Splits valid UTF-8 `text` into pre-tokens (raw bytes), appended to `pieces`.
  void Split(std::string_view text, std::vector<std::string>* pieces) const;

 private:
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    std::shared_ptr<Regex> regex;  // null: no split (ByteLevel with use_regex false)
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel only
  };
  Status AddFromJson(const nlohmann::json& j);
  static void ApplyStep(const Step& step, std::string_view piece, std::vector<std::string>* out);

  std::vector<Step> steps_;
};

}  // namespace tandem::tok
