// PCRE2 wrapper for the pre-tokenizer's split patterns (UTF + UCP, JIT when available).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::tok {

class Regex {
 public:
  // Compiles an HF (Oniguruma) pattern. \s and \S become \p{White_Space} / \P{White_Space} so that
  // they mean what Oniguruma's do (PCRE2's UCP \s also takes U+180E). `literal`: match the text.
  static Result<std::unique_ptr<Regex>> Compile(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Successive non-overlapping matches [begin, end) in valid UTF-8 `text` (an empty match
  // advances by one character).
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const;

 private:
  Regex() = default;
  void* code_ = nullptr;  // pcre2_code_8
  bool jit_ = false;
};

}  // namespace tandem::tok
