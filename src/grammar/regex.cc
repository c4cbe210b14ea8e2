#include "grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace tandem::grammar {

namespace {

constexpr int kMaxDepth = 200;
constexpr int kMaxRepeat = 10000;

using Ranges = std::vector<CodepointRange>;

Ranges Digits() { return {{'0', '9'}}; }
Ranges Word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
// ECMA-262 WhiteSpace and LineTerminator (what \s matches).
Ranges Space() {
  return {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}

Ranges Complement(Ranges r) { return ComplementRanges(std::move(r)); }

class RegexParser {
 public:
  RegexParser(std::string_view s, Grammar& g) : s_(s), g_(g) {}

  Result<int> Parse(RegexInfo* info) {
    size_t end = s_.size();
    RegexInfo found;
    if (!s_.empty() && s_[0] == '^') {
      found.anchored_start = true;
      pos_ = 1;
    }
    if (end > pos_ && s_[end - 1] == '$' && !Escaped(end - 1)) {
      found.anchored_end = true;
      --end;
    }
    s_ = s_.substr(0, end);
    int expr = -1;
    TANDEM_RETURN_IF_ERROR(Alternation(0, &expr));
    if (pos_ != s_.size()) return Error(s_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    if (info) *info = found;
    return expr;
  }

 private:
  bool Escaped(size_t i) const {  // an odd number of backslashes before i
    size_t n = 0;
    while (i > n && s_[i - 1 - n] == '\\') ++n;
    return n % 2 == 1;
  }

  Status Error(const std::string& what) const {
    return Err(StatusCode::kInvalidArgument, "regex: {} at offset {}", what, pos_);
  }
  bool More() const { return pos_ < s_.size(); }
  char Peek() const { return s_[pos_]; }

  Status Alternation(int depth, int* out) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    std::vector<int> alts;
    for (;;) {
      int seq = -1;
      TANDEM_RETURN_IF_ERROR(Concatenation(depth, &seq));
      alts.push_back(seq);
      if (More() && Peek() == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    *out = g_.Choice(std::move(alts));
    return Status::Ok();
  }

  Status Concatenation(int depth, int* out) {
    std::vector<int> items;
    while (More() && Peek() != '|' && Peek() != ')') {
      int atom = -1;
      TANDEM_RETURN_IF_ERROR(Atom(depth, &atom));
      TANDEM_RETURN_IF_ERROR(Quantifier(&atom));
      items.push_back(atom);
    }
    *out = g_.Sequence(std::move(items));
    return Status::Ok();
  }

  Status Atom(int depth, int* out) {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (More() && Peek() == '?') {
        if (s_.substr(pos_, 2) == "?:") {
          pos_ += 2;
        } else if (s_.substr(pos_, 2) == "?<" && s_.substr(pos_, 3) != "?<=" && s_.substr(pos_, 3) != "?<!") {
          size_t close = s_.find('>', pos_);
          if (close == std::string_view::npos) return Error("unterminated group name");
          pos_ = close + 1;
        } else {
          return Error("lookaround and flag groups are not supported");
        }
      }
      TANDEM_RETURN_IF_ERROR(Alternation(depth + 1, out));
      if (!More() || Peek() != ')') return Error("missing ')'");
      ++pos_;
      return Status::Ok();
    }
    if (c == '[') return Class(out);
    if (c == '.') {
      ++pos_;
      *out = g_.CharClass({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true);
      return Status::Ok();
    }
    if (c == '^' || c == '$') return Error("anchors inside the pattern are not supported");
    if (c == '*' || c == '+' || c == '?') return Error("nothing to repeat");
    if (c == '\\') {
      Ranges ranges;
      bool is_class = false;
      uint32_t cp = 0;
      TANDEM_RETURN_IF_ERROR(Escape(false, &cp, &ranges, &is_class));
      *out = is_class ? g_.CharClass(std::move(ranges), false) : Literal(cp);
      return Status::Ok();
    }
    uint32_t cp = 0;
    TANDEM_RETURN_IF_ERROR(Utf8(&cp));
    *out = Literal(cp);
    return Status::Ok();
  }

  int Literal(uint32_t cp) {
    std::string bytes;
    AppendUtf8(cp, bytes);
    return g_.Bytes(std::move(bytes));
  }

  Status Utf8(uint32_t* cp) {
    const size_t len = DecodeUtf8(s_, pos_, cp);
    if (len == 0) return Error("invalid UTF-8");
    pos_ += len;
    return Status::Ok();
  }

  Status Hex(size_t digits, uint32_t* cp) {
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      if (!More() || !std::isxdigit(static_cast<unsigned char>(Peek()))) return Error("bad hex escape");
      const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[pos_++])));
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    *cp = v;
    return Status::Ok();
  }

  // After a backslash: one code point, or a class (\d \w \s and their negations).
  Status Escape(bool in_class, uint32_t* cp, Ranges* ranges, bool* is_class) {
    ++pos_;  // the backslash
    if (!More()) return Error("trailing backslash");
    const char e = s_[pos_++];
    *is_class = false;
    switch (e) {
      case 'd': *ranges = Digits(); *is_class = true; return Status::Ok();
      case 'D': *ranges = Complement(Digits()); *is_class = true; return Status::Ok();
      case 'w': *ranges = Word(); *is_class = true; return Status::Ok();
      case 'W': *ranges = Complement(Word()); *is_class = true; return Status::Ok();
      case 's': *ranges = Space(); *is_class = true; return Status::Ok();
      case 'S': *ranges = Complement(Space()); *is_class = true; return Status::Ok();
      case 'n': *cp = '\n'; return Status::Ok();
      case 'r': *cp = '\r'; return Status::Ok();
      case 't': *cp = '\t'; return Status::Ok();
      case 'f': *cp = '\f'; return Status::Ok();
      case 'v': *cp = '\v'; return Status::Ok();
      case '0': *cp = 0; return Status::Ok();
      case 'b':
        if (in_class) {
          *cp = '\b';
          return Status::Ok();
        }
        return Error("\\b (word boundary) is not supported");
      case 'x': return Hex(2, cp);
      case 'u':
        if (More() && Peek() == '{') {
          ++pos_;
          size_t close = s_.find('}', pos_);
          if (close == std::string_view::npos || close == pos_ || close - pos_ > 6) return Error("bad \\u{...}");
          TANDEM_RETURN_IF_ERROR(Hex(close - pos_, cp));
          ++pos_;
          if (*cp > kMaxCodepoint) return Error("code point out of range");
          return Status::Ok();
        }
        return Hex(4, cp);
      case 'p': case 'P': return Error("\\p{...} classes are not supported");
      case 'B': return Error("\\B is not supported");
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) return Error("backreferences are not supported");
        if (std::isalnum(static_cast<unsigned char>(e))) return Error(std::string("unknown escape \\") + e);
        --pos_;
        return Utf8(cp);  // an escaped metacharacter or punctuation: itself
    }
  }

  Status Class(int* out) {
    ++pos_;  // [
    bool negated = More() && Peek() == '^';
    if (negated) ++pos_;
    Ranges ranges;
    while (More() && Peek() != ']') {  // "[]" is the empty class in ECMA-262, "[^]" any character
      uint32_t lo = 0;
      Ranges shorthand;
      bool is_class = false;
      if (Peek() == '\\') {
        TANDEM_RETURN_IF_ERROR(Escape(true, &lo, &shorthand, &is_class));
      } else {
        TANDEM_RETURN_IF_ERROR(Utf8(&lo));
      }
      if (is_class) {
        ranges.insert(ranges.end(), shorthand.begin(), shorthand.end());
        continue;
      }
      uint32_t hi = lo;
      if (pos_ + 1 < s_.size() && Peek() == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        bool hi_class = false;
        if (Peek() == '\\') {
          TANDEM_RETURN_IF_ERROR(Escape(true, &hi, &shorthand, &hi_class));
          if (hi_class) return Error("a class escape cannot end a range");
        } else {
          TANDEM_RETURN_IF_ERROR(Utf8(&hi));
        }
        if (hi < lo) return Error("class range out of order");
      }
      ranges.push_back({lo, hi});
    }
    if (!More()) return Error("missing ']'");
    ++pos_;
    *out = g_.CharClass(negated ? Complement(std::move(ranges)) : std::move(ranges), false);
    return Status::Ok();
  }

  Status Number(int* out) {
    const size_t start = pos_;
    long v = 0;
    while (More() && std::isdigit(static_cast<unsigned char>(Peek()))) {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > kMaxRepeat) return Error("repetition count over 10000");
    }
    if (pos_ == start) return Error("expected a number");
    *out = static_cast<int>(v);
    return Status::Ok();
  }

  Status Quantifier(int* atom) {
    if (!More()) return Status::Ok();
    int min = 0, max = 0;
    const char c = Peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : kUnbounded;
    } else if (c == '{') {
      const size_t save = pos_;
      ++pos_;
      if (!More() || !std::isdigit(static_cast<unsigned char>(Peek()))) {  // a literal '{'
        pos_ = save;
        return Status::Ok();
      }
      TANDEM_RETURN_IF_ERROR(Number(&min));
      max = min;
      if (More() && Peek() == ',') {
        ++pos_;
        max = kUnbounded;
        if (More() && Peek() != '}') TANDEM_RETURN_IF_ERROR(Number(&max));
      }
      if (!More() || Peek() != '}') return Error("missing '}'");
      ++pos_;
      if (max != kUnbounded && max < min) return Error("repetition {n,m} with m < n");
    } else {
      return Status::Ok();
    }
    if (More() && Peek() == '?') ++pos_;  // lazy: the same language
    if (More() && Peek() == '+') return Error("possessive quantifiers are not supported");
    if (More() && (Peek() == '*' || Peek() == '+' || Peek() == '?')) return Error("nothing to repeat");
    *atom = g_.Repeat(*atom, min, max);
    return Status::Ok();
  }

  std::string_view s_;
  Grammar& g_;
  size_t pos_ = 0;
};

}  // namespace

Result<int> RegexToExpr(std::string_view pattern, Grammar& g, RegexInfo* info) {
  RegexParser p(pattern, g);
  return p.Parse(info);
}

Result<Grammar> RegexToGrammar(std::string_view pattern) {
  Grammar g;
  TANDEM_ASSIGN_OR_RETURN(int expr, RegexToExpr(pattern, g));
  const int root = g.RuleNamed("root");
  g.SetBody(root, expr);
  g.set_root(root);
  TANDEM_RETURN_IF_ERROR(g.Validate());
  return g;
}

}  // namespace tandem::grammar
