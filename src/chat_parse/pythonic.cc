// The pythonic tool-call format: a Python list of calls with literal keyword arguments,
// [get_weather(city="Paris", days=3), search(q='x', opts={"a": [1, 2.5, True, None]})].
// Literals: strings ('...', "...", with \\ \' \" \n \t \r \uXXXX escapes), integers, floats,
// True / False / None, lists, tuples (as lists) and dicts with string keys.
#include <cstdlib>

#include "chat_parse/tool_calls.h"

namespace tandem::chat_parse {

using ojson = nlohmann::ordered_json;

namespace {

class PyParser {
 public:
  explicit PyParser(std::string_view s) : s_(s) {}

  std::optional<std::vector<ToolCall>> Calls() {
    Space();
    if (!Eat('[')) return std::nullopt;
    std::vector<ToolCall> calls;
    Space();
    while (!Eat(']')) {
      if (!calls.empty() && !Eat(',')) return std::nullopt;
      Space();
      if (Eat(']')) break;  // a trailing comma
      std::string name = Name();
      if (name.empty()) return std::nullopt;
      Space();
      if (!Eat('(')) return std::nullopt;
      ojson args = ojson::object();
      Space();
      while (!Eat(')')) {
        if (!args.empty() && !Eat(',')) return std::nullopt;
        Space();
        if (Eat(')')) break;
        std::string key = Name();
        Space();
        if (key.empty() || !Eat('=')) return std::nullopt;
        std::optional<ojson> v = Value(0);
        if (!v) return std::nullopt;
        args[key] = std::move(*v);
        Space();
      }
      calls.push_back({std::move(name), CompactJson(args)});
      Space();
    }
    Space();
    if (i_ != s_.size()) return std::nullopt;
    return calls;
  }

 private:
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  static bool NameChar(char c, bool first) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (!first && ((c >= '0' && c <= '9') || c == '.'));
  }
  std::string Name() {
    size_t b = i_;
    while (i_ < s_.size() && NameChar(s_[i_], i_ == b)) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }

  std::optional<ojson> Value(int depth) {
    if (depth > 64) return std::nullopt;
    Space();
    if (i_ >= s_.size()) return std::nullopt;
    const char c = s_[i_];
    if (c == '"' || c == '\'') return String();
    if (c == '[' || c == '(') {
      const char close = c == '[' ? ']' : ')';
      ++i_;
      ojson a = ojson::array();
      Space();
      while (!Eat(close)) {
        if (!a.empty() && !Eat(',')) return std::nullopt;
        Space();
        if (Eat(close)) break;
        std::optional<ojson> v = Value(depth + 1);
        if (!v) return std::nullopt;
        a.push_back(std::move(*v));
        Space();
      }
      return a;
    }
    if (c == '{') {
      ++i_;
      ojson o = ojson::object();
      Space();
      while (!Eat('}')) {
        if (!o.empty() && !Eat(',')) return std::nullopt;
        Space();
        if (Eat('}')) break;
        std::optional<ojson> k = Value(depth + 1);
        if (!k || !k->is_string()) return std::nullopt;
        Space();
        if (!Eat(':')) return std::nullopt;
        std::optional<ojson> v = Value(depth + 1);
        if (!v) return std::nullopt;
        o[k->get<std::string>()] = std::move(*v);
        Space();
      }
      return o;
    }
    std::string word = Name();
    if (word == "True") return ojson(true);
    if (word == "False") return ojson(false);
    if (word == "None") return ojson(nullptr);
    if (!word.empty()) return std::nullopt;
    return Number();
  }

  std::optional<ojson> Number() {
    size_t b = i_;
    if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
    bool is_float = false;
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c >= '0' && c <= '9') ++i_;
      else if (c == '.' || c == 'e' || c == 'E') is_float = true, ++i_;
      else if ((c == '-' || c == '+') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E')) ++i_;
      else break;
    }
    std::string text(s_.substr(b, i_ - b));
    if (text.empty() || text == "-" || text == "+") return std::nullopt;
    char* end = nullptr;
    if (!is_float) {
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (*end == '\0') return ojson(v);
    }
    double d = std::strtod(text.c_str(), &end);
    if (*end != '\0') return std::nullopt;
    return ojson(d);
  }

  std::optional<ojson> String() {
    const char quote = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != quote) {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return std::nullopt;
      char e = s_[i_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': case '\'': case '"': out += e; break;
        case 'u': {
          if (i_ + 4 > s_.size()) return std::nullopt;
          std::string hex(s_.substr(i_, 4));
          char* end = nullptr;
          unsigned long cp = std::strtoul(hex.c_str(), &end, 16);
          if (*end != '\0') return std::nullopt;
          i_ += 4;
          if (cp < 0x80) out += static_cast<char>(cp);
          else if (cp < 0x800) out += static_cast<char>(0xC0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3F));
          else out += static_cast<char>(0xE0 | (cp >> 12)), out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
               out += static_cast<char>(0x80 | (cp & 0x3F));
          break;
        }
        default: out += '\\', out += e; break;
      }
    }
    if (!Eat(quote)) return std::nullopt;
    return ojson(std::move(out));
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

std::optional<std::vector<ToolCall>> ParsePythonicCalls(std::string_view text) {
  std::optional<std::vector<ToolCall>> calls = PyParser(text).Calls();
  if (!calls || calls->empty()) return std::nullopt;
  return calls;
}

}  // namespace tandem::chat_parse
