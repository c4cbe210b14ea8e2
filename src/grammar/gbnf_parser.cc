// ParseGbnf (grammar.h): a recursive-descent reader of llama.cpp's GBNF notation.
#include <cctype>
#include <string>

#include "grammar/grammar.h"

namespace tandem::grammar {

namespace {

constexpr int kMaxNesting = 256;  // ( ) depth: deeper is an error, not a stack overflow

class Parser {
 public:
  Parser(std::string_view text, Grammar& g) : s_(text), g_(g) {}

  Status ParseAll() {
    for (;;) {
      SkipSpace(true);
      if (pos_ >= s_.size()) return Status::Ok();
      std::string name = Name();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace(false);
      if (s_.substr(pos_, 3) != "::=") return Error("expected '::=' after the rule name");
      pos_ += 3;
      const int rule = g_.RuleNamed(name);
      defined_.resize(g_.rules().size(), false);
      if (defined_[rule]) return Error("rule '" + name + "' defined twice");
      int body = -1;
      TANDEM_RETURN_IF_ERROR(Alternatives(0, &body));
      g_.SetBody(rule, body);
      defined_.resize(g_.rules().size(), false);
      defined_[rule] = true;
      SkipSpace(false);
      if (pos_ < s_.size() && s_[pos_] != '\n') return Error("unexpected character");
    }
  }

 private:
  Status Error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Err(StatusCode::kInvalidArgument, "grammar: {} at line {}, column {}", what, line, col);
  }

  // Spaces and comments; newlines too when `newlines` (between rules, or inside parentheses).
  void SkipSpace(bool newlines) {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' ||
                                s_[pos_] == '_')) {
      ++pos_;
    }
    return std::string(s_.substr(start, pos_ - start));
  }

  // One code point of a literal or class, escapes decoded.
  Status Char(uint32_t* cp) {
    if (pos_ >= s_.size()) return Error("unterminated literal or class");
    unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c == '\\') {
      if (pos_ + 1 >= s_.size()) return Error("unterminated escape");
      char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': *cp = '\n'; return Status::Ok();
        case 'r': *cp = '\r'; return Status::Ok();
        case 't': *cp = '\t'; return Status::Ok();
        case '\\': case '"': case ']': case '[': case '-': case '^': *cp = static_cast<uint8_t>(e); return Status::Ok();
        case 'x': return Hex(2, cp);
        case 'u': return Hex(4, cp);
        case 'U': return Hex(8, cp);
        default: return Error(std::string("unknown escape \\") + e);
      }
    }
    // UTF-8 as written.
    const size_t len = DecodeUtf8(s_, pos_, cp);
    if (len == 0) return Error("invalid UTF-8");
    pos_ += len;
    return Status::Ok();
  }

  Status Hex(int digits, uint32_t* cp) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_]))) {
        return Error("bad hex escape");
      }
      char h = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[pos_++])));
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    if (v > kMaxCodepoint) return Error("code point out of range");
    *cp = v;
    return Status::Ok();
  }

  Status Alternatives(int depth, int* out) {
    if (depth > kMaxNesting) return Error("grammar nested too deeply");
    std::vector<int> alts;
    for (;;) {
      int seq = -1;
      TANDEM_RETURN_IF_ERROR(Sequence(depth, &seq));
      alts.push_back(seq);
      SkipSpace(depth > 0);
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        SkipSpace(true);  // an alternative may continue on the next line
        continue;
      }
      break;
    }
    *out = g_.Choice(std::move(alts));
    return Status::Ok();
  }

  Status Sequence(int depth, int* out) {
    std::vector<int> items;
    for (;;) {
      SkipSpace(depth > 0);
      if (pos_ >= s_.size()) break;
      char c = s_[pos_];
      int item = -1;
      if (c == '"') {
        ++pos_;
        std::string bytes;
        while (pos_ < s_.size() && s_[pos_] != '"') {
          uint32_t cp = 0;
          TANDEM_RETURN_IF_ERROR(Char(&cp));
          AppendUtf8(cp, bytes);
        }
        if (pos_ >= s_.size()) return Error("unterminated literal");
        ++pos_;
        item = g_.Bytes(std::move(bytes));
      } else if (c == '[') {
        ++pos_;
        bool negated = pos_ < s_.size() && s_[pos_] == '^';
        if (negated) ++pos_;
        std::vector<CodepointRange> ranges;
        while (pos_ < s_.size() && s_[pos_] != ']') {
          uint32_t lo = 0, hi = 0;
          TANDEM_RETURN_IF_ERROR(Char(&lo));
          hi = lo;
          if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
            ++pos_;
            TANDEM_RETURN_IF_ERROR(Char(&hi));
            if (hi < lo) return Error("class range out of order");
          }
          ranges.push_back({lo, hi});
        }
        if (pos_ >= s_.size()) return Error("unterminated class");
        ++pos_;
        item = g_.CharClass(std::move(ranges), negated);
      } else if (c == '.') {
        ++pos_;
        item = g_.CharClass({}, true);
      } else if (c == '(') {
        ++pos_;
        SkipSpace(true);
        TANDEM_RETURN_IF_ERROR(Alternatives(depth + 1, &item));
        SkipSpace(true);
        if (pos_ >= s_.size() || s_[pos_] != ')') return Error("expected ')'");
        ++pos_;
      } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') {
        size_t save = pos_;
        std::string name = Name();
        SkipSpace(false);
        if (s_.substr(pos_, 3) == "::=") {  // the next rule starts: this sequence has ended
          pos_ = save;
          break;
        }
        item = g_.RuleRef(g_.RuleNamed(name));
      } else {
        break;
      }
      TANDEM_RETURN_IF_ERROR(Postfix(&item));
      items.push_back(item);
    }
    *out = g_.Sequence(std::move(items));
    return Status::Ok();
  }

  Status Postfix(int* item) {
    for (;;) {
      if (pos_ >= s_.size()) return Status::Ok();
      char c = s_[pos_];
      if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        *item = g_.Repeat(*item, c == '+' ? 1 : 0, c == '?' ? 1 : kUnbounded);
      } else if (c == '{') {
        ++pos_;
        int min = 0, max = 0;
        TANDEM_RETURN_IF_ERROR(Number(&min));
        max = min;
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          if (pos_ < s_.size() && s_[pos_] == '}') {
            max = kUnbounded;
          } else {
            TANDEM_RETURN_IF_ERROR(Number(&max));
            if (max < min) return Error("repetition {m,n} with n < m");
          }
        }
        if (pos_ >= s_.size() || s_[pos_] != '}') return Error("expected '}'");
        ++pos_;
        *item = g_.Repeat(*item, min, max);
      } else {
        return Status::Ok();
      }
    }
  }

  Status Number(int* out) {
    size_t start = pos_;
    long v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > 100000) return Error("repetition count too large");
    }
    if (pos_ == start) return Error("expected a number");
    *out = static_cast<int>(v);
    return Status::Ok();
  }

  std::string_view s_;
  Grammar& g_;
  size_t pos_ = 0;
  std::vector<bool> defined_;
};

}  // namespace

Result<Grammar> ParseGbnf(std::string_view text, std::string_view root) {
  Grammar g;
  Parser p(text, g);
  TANDEM_RETURN_IF_ERROR(p.ParseAll());
  int r = g.FindRule(root);
  if (r < 0) return Err(StatusCode::kInvalidArgument, "grammar: no rule named '{}'", root);
  g.set_root(r);
  TANDEM_RETURN_IF_ERROR(g.Validate());
  return g;
}

}  // namespace tandem::grammar
