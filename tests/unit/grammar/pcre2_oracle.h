// PCRE2 (Debian libpcre2-dev) as the oracle for regular grammars: a full match, and whether a
// string can still be extended to a match (PCRE2_PARTIAL_HARD), in UTF mode.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem::grammar::testing {

class Pcre2 {
 public:
  // js_dot: "." as in ECMA-262 (not CR or LF; the tests keep U+2028/9 out), else any character.
  explicit Pcre2(const std::string& pattern, bool js_dot = false) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    const std::string anchored = "(?:" + pattern + ")\\z";
    pcre2_compile_context* ctx = pcre2_compile_context_create(nullptr);
    pcre2_set_newline(ctx, PCRE2_NEWLINE_ANYCRLF);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(anchored.c_str()), anchored.size(),
                          PCRE2_UTF | PCRE2_ANCHORED | (js_dot ? 0 : PCRE2_DOTALL), &err, &offset, ctx);
    pcre2_compile_context_free(ctx);
    if (!code_) throw std::runtime_error("bad test pattern: " + pattern);
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~Pcre2() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  Pcre2(const Pcre2&) = delete;
  Pcre2& operator=(const Pcre2&) = delete;

  bool FullMatch(std::string_view s) const { return Run(s, 0) >= 0; }
  // A match, or a prefix of one (PCRE2_ERROR_PARTIAL). Invalid UTF-8 is neither.
  bool Viable(std::string_view s) const {
    int rc = Run(s, PCRE2_PARTIAL_HARD);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
  }

 private:
  int Run(std::string_view s, uint32_t options) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, options, data_,
                       nullptr);
  }
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

}  // namespace tandem::grammar::testing
