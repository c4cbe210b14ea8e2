// The template lexer (see chat_lexer.h). Whitespace rules follow jinja2:
//   - newlines in the source are normalized to "\n" and one trailing newline is dropped;
//   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all after it;
//   - trim_blocks: the first newline after "%}" or "#}" is removed (not after "+%}");
//   - lstrip_blocks: spaces and tabs from the start of a line up to "{%" or "{#" are removed
//     (not for "{%+"); "start of a line" includes the text right after a tag that ended with a
//     newline it consumed.
#include "chat/lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "chat/text.h"
#include "chat/value.h"

namespace tandem::chat {
namespace {

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string Normalize(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t k = 0; k < src.size(); ++k) {
    if (src[k] == '\r') {
      out.push_back('\n');
      if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
    } else {
      out.push_back(src[k]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t start = FindTagStart(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      int text_line = line_;
      if (start == src_.size()) {
        Emit(Token::Type::kText, std::move(text), text_line);
        line_ += Newlines(src_, pos_, start);
        pos_ = start;
        break;
      }
      char kind = src_[start + 1];
      char mod = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (mod == '-') {
        size_t e = text.size();
        while (e > 0 && IsWs(text[e - 1])) --e;
        text.resize(e);
      } else if (mod != '+' && (kind == '%' || kind == '#')) {
        size_t l = text.rfind('\n');
        l = l == std::string::npos ? 0 : l + 1;
        if (l > 0 || line_starting) {
          bool all_ws = true;
          for (size_t k = l; k < text.size(); ++k) all_ws = all_ws && IsWs(text[k]);
          if (all_ws) text.resize(l);
        }
      }
      line_ += Newlines(src_, pos_, start);
      Emit(Token::Type::kText, std::move(text), text_line);
      pos_ = start + 2 + ((mod == '-' || (mod == '+' && kind != '{')) ? 1 : 0);
      if (kind == '#') {
        line_starting = LexComment(start);
      } else if (kind == '%' && IsRawTag(pos_)) {
        line_starting = LexRaw(start);
      } else {
        line_starting = LexTag(kind == '{', start);
      }
    }
    tokens_.push_back(Token{Token::Type::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  static int Newlines(const std::string& s, size_t b, size_t e) {
    int n = 0;
    for (size_t k = b; k < e; ++k) n += s[k] == '\n';
    return n;
  }

  [[noreturn]] void Fail(const std::string& what, int line) {
    throw TemplateError(what + " at line " + std::to_string(line), false, true);
  }

  size_t FindTagStart(size_t from) const {
    for (size_t k = src_.find('{', from); k != std::string::npos; k = src_.find('{', k + 1)) {
      if (k + 1 < src_.size() && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return src_.size();
  }

  void Emit(Token::Type type, std::string text, int line) {
    if (type == Token::Type::kText && text.empty()) return;
    tokens_.push_back(Token{type, std::move(text), line});
  }

  // After a closing delimiter ending at pos_: '-' strips all whitespace, trim_blocks one newline.
  // Returns whether the consumed text ends with a newline (jinja2's "line starting" state).
  bool AfterClose(bool strip_all, bool trim_newline) {
    bool nl = false;
    if (strip_all) {
      while (pos_ < src_.size() && IsWs(src_[pos_])) {
        nl = src_[pos_] == '\n';
        line_ += nl;
        ++pos_;
      }
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      ++line_;
      nl = true;
    }
    return nl;
  }

  bool LexComment(size_t start) {
    int line = line_;
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) Fail("unterminated comment", line);
    bool strip = end > pos_ && src_[end - 1] == '-';
    bool plus = end > pos_ && src_[end - 1] == '+';
    line_ += Newlines(src_, pos_, end);
    pos_ = end + 2;
    return AfterClose(strip, !plus);
  }

  bool IsRawTag(size_t p) const {
    while (p < src_.size() && IsWs(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && IsWs(src_[p])) ++p;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  bool LexRaw(size_t start) {
    int line = line_;
    size_t close = src_.find("%}", pos_);
    bool strip = src_[close - 1] == '-';
    line_ += Newlines(src_, pos_, close);
    pos_ = close + 2;
    AfterClose(strip, src_[close - 1] != '+');
    // Find {% endraw %} (with optional modifiers).
    size_t k = pos_;
    while (true) {
      k = src_.find("{%", k);
      if (k == std::string::npos) Fail("unterminated raw block", line);
      size_t p = k + 2;
      char mod = p < src_.size() ? src_[p] : '\0';
      if (mod == '-' || mod == '+') ++p;
      while (p < src_.size() && IsWs(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") == 0) {
        std::string text = src_.substr(pos_, k - pos_);
        if (mod == '-') {
          size_t e = text.size();
          while (e > 0 && IsWs(text[e - 1])) --e;
          text.resize(e);
        }
        int text_line = line_;
        line_ += Newlines(src_, pos_, k);
        Emit(Token::Type::kText, std::move(text), text_line);
        size_t c = src_.find("%}", p);
        if (c == std::string::npos) Fail("unterminated raw block", line);
        bool s2 = src_[c - 1] == '-';
        line_ += Newlines(src_, k, c);
        pos_ = c + 2;
        return AfterClose(s2, src_[c - 1] != '+');
      }
      k += 2;
    }
  }

  // Expression tokens up to "}}" / "%}" (not inside brackets, as jinja2 balances them).
  bool LexTag(bool is_var, size_t start) {
    int open_line = line_;
    tokens_.push_back(Token{is_var ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", line_});
    int depth = 0;
    const char close = is_var ? '}' : '%';
    while (true) {
      while (pos_ < src_.size() && IsWs(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) Fail(is_var ? "unterminated '{{'" : "unterminated '{%'", open_line);
      char c = src_[pos_];
      if (depth == 0) {
        bool strip = c == '-' || (c == '+' && !is_var);
        size_t p = pos_ + (strip ? 1 : 0);
        if (p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}') {
          tokens_.push_back(Token{is_var ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", line_});
          pos_ = p + 2;
          return AfterClose(c == '-', !is_var && c != '+');
        }
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        tokens_.push_back(Token{Token::Type::kName, src_.substr(b, pos_ - b), line_});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        LexNumber();
      } else if (c == '\'' || c == '"') {
        LexString(c);
      } else {
        static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : kTwo)
          if (src_.compare(pos_, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-*/%~<>=.,:|()[]{}", c)) Fail(std::string("unexpected character '") + c + "'", line_);
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        tokens_.push_back(Token{Token::Type::kOp, op, line_});
        pos_ += op.size();
      }
    }
  }

  void LexNumber() {
    size_t b = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
    };
    digits();
    bool is_float = false;
    // A fraction needs a digit after '.', so "a.0.1" style access and "1.x" stay apart.
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])) &&
        !(b > 0 && src_[b - 1] == '.')) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text;
    for (size_t k = b; k < pos_; ++k)
      if (src_[k] != '_') text.push_back(src_[k]);
    Token t{is_float ? Token::Type::kFloat : Token::Type::kInt, text, line_};
    // Not std::stod / std::stoll: they throw out_of_range (escaping Parse) for 1e999 or 2**64.
    // Python reads 1e999 as inf and 1e-999 as 0.0, as strtod; an integer beyond 64 bits is an error.
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) Fail("integer literal '" + text + "' out of range", line_);
    }
    tokens_.push_back(std::move(t));
  }

  void LexString(char quote) {
    int line = line_;
    ++pos_;
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) Fail("unterminated string", line);
      char c = src_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        value.push_back(c);
        continue;
      }
      if (pos_ >= src_.size()) Fail("unterminated string", line);
      char e = src_[pos_++];
      auto hex = [&](int n) {
        // n hex digits, as Python requires them (std::stoul threw on "\xZZ" and read "\x4Z" as 4).
        if (pos_ + n > src_.size()) Fail("bad escape in string", line_);
        char32_t v = 0;
        for (int k = 0; k < n; ++k) {
          const char h = src_[pos_ + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) Fail("bad escape in string", line_);
          v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (v > 0x10FFFF) Fail("bad escape in string (beyond U+10FFFF)", line_);
        pos_ += n;
        AppendUtf8(value, v);
      };
      switch (e) {
        case 'n': value.push_back('\n'); break;
        case 't': value.push_back('\t'); break;
        case 'r': value.push_back('\r'); break;
        case '\\': value.push_back('\\'); break;
        case '\'': value.push_back('\''); break;
        case '"': value.push_back('"'); break;
        case 'a': value.push_back('\a'); break;
        case 'b': value.push_back('\b'); break;
        case 'f': value.push_back('\f'); break;
        case 'v': value.push_back('\v'); break;
        case '\n': ++line_; break;  // line continuation
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            int v = e - '0', n = 1;
            while (n < 3 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7') {
              v = v * 8 + (src_[pos_++] - '0');
              ++n;
            }
            AppendUtf8(value, static_cast<char32_t>(v));
          } else {
            value.push_back('\\');
            value.push_back(e);
          }
      }
    }
    tokens_.push_back(Token{Token::Type::kString, std::move(value), line});
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(const std::string& source) { return Lexer(Normalize(source)).Run(); }

}  // namespace tandem::chat
