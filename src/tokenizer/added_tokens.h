// Added tokens of tokenizer.json ("added_tokens": id, content, special, lstrip, rstrip, normalized,
// single_word) and the split of a text on them (huggingface/tokenizers AddedVocabulary): at each
// position the longest token that matches, leftmost first; the text between matches goes through
// the normalizer, pre-tokenizer and model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tandem::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;   // the match swallows whitespace on its left
  bool rstrip = false;   // ... and on its right
  bool normalized = false;  // matched in normalized text (else in the raw text)
  bool single_word = false;  // only where not inside a word
};

// A byte trie over the contents of a set of added tokens.
class AddedTokenMatcher {
 public:
  struct Segment {
    size_t begin, end;  // bytes of the text
    int32_t token = -1;  // index into the tokens given to Build(), -1: ordinary text
  };
  // `tokens` must outlive the matcher; `patterns[i]` is the text to match for tokens[i].
  void Build(const std::vector<AddedToken>* tokens, const std::vector<std::string>& patterns,
             const std::vector<size_t>& indices);
  bool empty() const { return num_patterns_ == 0; }
  // Splits `text` into ordinary segments and matches. Special tokens match only when
  // `parse_special` and the match does not overlap `literal_ranges` (sorted, disjoint; offsets
  // relative to `text` shifted by `range_offset`).
  void Split(std::string_view text, bool parse_special,
             const std::vector<std::pair<size_t, size_t>>& literal_ranges, size_t range_offset,
             std::vector<Segment>* out) const;

 private:
  int32_t Child(int32_t node, unsigned char b) const {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | b);
    return it == edges_.end() ? -1 : it->second;
  }

  const std::vector<AddedToken>* tokens_ = nullptr;
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
  std::vector<int32_t> terminal_;                // node -> token index or -1
  bool first_byte_[256] = {};
  size_t num_patterns_ = 0;
};

}  // namespace tandem::tok
