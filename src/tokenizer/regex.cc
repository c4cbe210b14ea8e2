#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

namespace tandem::tok {

namespace {

// Oniguruma \s is Unicode White_Space; rewrite \s, \S outside and inside classes.
std::string TranslatePattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[i + 1];
      if (c == 's') {
        out += "\\p{White_Space}";
      } else if (c == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += p[i];
        out += c;
      }
      ++i;
      continue;
    }
    out += p[i];
  }
  return out;
}

pcre2_code* Code(void* p) { return static_cast<pcre2_code*>(p); }

}  // namespace

Result<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern, bool literal) {
  const std::string translated = literal ? std::string(pattern) : TranslatePattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                                   &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(error, msg, sizeof(msg));
    return Err(StatusCode::kInvalidArgument, "tokenizer.json: cannot compile split regex '{}' at {}: {}", pattern,
               offset, reinterpret_cast<const char*>(msg));
  }
  std::unique_ptr<Regex> re(new Regex());
  re->code_ = code;
  re->jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return re;
}

Regex::~Regex() {
  if (code_ != nullptr) pcre2_code_free(Code(code_));
}

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const {
  matches->clear();
  struct MatchData {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~MatchData() { pcre2_match_data_free(md); }
  };
  thread_local MatchData data;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    // The text was validated once by the caller: no per-call UTF check (it would make this quadratic).
    int rc = jit_ ? pcre2_jit_match(Code(code_), subject, text.size(), pos, 0, data.md, nullptr)
                  : PCRE2_ERROR_JIT_BADOPTION;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION) {
      rc = pcre2_match(Code(code_), subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.md, nullptr);
    }
    if (rc < 0) break;  // no match (or a matching error: the rest stays unsplit)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      matches->emplace_back(b, e);
      pos = e;
    } else {  // empty match: step over one character
      if (b >= text.size()) break;
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
    }
  }
}

}  // namespace tandem::tok
