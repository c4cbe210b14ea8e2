// Python str semantics over UTF-8 (see chat_text.h).
#include "chat/text.h"

#include <algorithm>
#include <stdexcept>

namespace tandem::chat {

size_t Utf8DecodeOne(std::string_view s, size_t i, char32_t* cp) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n < 0 || i + static_cast<size_t>(n) >= s.size()) {
    *cp = 0xFFFD;
    return 1;
  }
  char32_t v = n == 0 ? c : n == 1 ? (c & 0x1F) : n == 2 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k <= n; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) {
      *cp = 0xFFFD;
      return 1;
    }
    v = (v << 6) | (cc & 0x3F);
  }
  *cp = v;
  return static_cast<size_t>(n) + 1;
}

std::u32string Utf8Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    i += Utf8DecodeOne(s, i, &cp);
    out.push_back(cp);
  }
  return out;
}

void AppendUtf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string Utf8Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(out, c);
  return out;
}

bool IsAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t Utf8Length(std::string_view s) {
  if (IsAscii(s)) return s.size();
  return Utf8Decode(s).size();
}

bool IsPySpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t ToLowerCp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

char32_t ToUpperCp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

bool IsCased(char32_t c) { return ToLowerCp(c) != c || ToUpperCp(c) != c; }
bool IsAlnumCp(char32_t c) {
  return (c >= '0' && c <= '9') || IsCased(c);
}

namespace {
template <typename F>
std::string MapCp(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  if (IsAscii(s)) {
    for (char c : s) out.push_back(static_cast<char>(f(static_cast<char32_t>(c))));
    return out;
  }
  for (char32_t c : Utf8Decode(s)) AppendUtf8(out, f(c));
  return out;
}
}  // namespace

std::string PyLower(std::string_view s) { return MapCp(s, ToLowerCp); }
std::string PyUpper(std::string_view s) { return MapCp(s, ToUpperCp); }

std::string PyTitle(std::string_view s) {
  std::u32string u = Utf8Decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    bool cased = IsCased(c);
    if (cased) c = prev_cased ? ToLowerCp(c) : ToUpperCp(c);
    prev_cased = cased;
  }
  return Utf8Encode(u);
}

std::string PyCapitalize(std::string_view s) {
  std::u32string u = Utf8Decode(s);
  for (size_t k = 0; k < u.size(); ++k) u[k] = k == 0 ? ToUpperCp(u[k]) : ToLowerCp(u[k]);
  return Utf8Encode(u);
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = Utf8Decode(s);
  std::u32string set;
  if (chars) set = Utf8Decode(*chars);
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : IsPySpace(c); };
  size_t b = 0, e = u.size();
  if (left) while (b < e && strip_it(u[b])) ++b;
  if (right) while (e > b && strip_it(u[e - 1])) --e;
  return Utf8Encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t k = s.find(*sep, pos);
        if (k == std::string_view::npos) break;
        parts.emplace_back(s.substr(pos, k - pos));
        pos = k + sep->size();
      }
      parts.emplace_back(s.substr(pos));
    } else {
      size_t end = s.size();
      int64_t n = 0;
      while (maxsplit < 0 || n < maxsplit) {
        if (end < sep->size()) break;
        size_t k = s.rfind(*sep, end - sep->size());
        if (k == std::string_view::npos) break;
        parts.emplace_back(s.substr(k + sep->size(), end - k - sep->size()));
        end = k;
        ++n;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  std::u32string u = Utf8Decode(s);
  const int64_t n = static_cast<int64_t>(u.size());
  if (!from_right) {
    int64_t i = 0;
    while (true) {
      while (i < n && IsPySpace(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        int64_t e = n;
        while (e > i && IsPySpace(u[e - 1])) --e;
        parts.push_back(Utf8Encode(std::u32string_view(u).substr(i, e - i)));
        break;
      }
      int64_t j = i;
      while (j < n && !IsPySpace(u[j])) ++j;
      parts.push_back(Utf8Encode(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
  } else {
    int64_t i = n;
    while (true) {
      while (i > 0 && IsPySpace(u[i - 1])) --i;
      if (i <= 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        int64_t b = 0;
        while (b < i && IsPySpace(u[b])) ++b;
        parts.push_back(Utf8Encode(std::u32string_view(u).substr(b, i - b)));
        break;
      }
      int64_t j = i;
      while (j > 0 && !IsPySpace(u[j - 1])) --j;
      parts.push_back(Utf8Encode(std::u32string_view(u).substr(j, i - j)));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> PySplitLines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  std::u32string u = Utf8Decode(s);
  size_t start = 0, i = 0;
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < u.size()) {
    if (is_break(u[i])) {
      size_t eol = i + 1;
      if (u[i] == '\r' && eol < u.size() && u[eol] == '\n') ++eol;
      lines.push_back(Utf8Encode(std::u32string_view(u).substr(start, (keepends ? eol : i) - start)));
      start = i = eol;
    } else {
      ++i;
    }
  }
  if (start < u.size()) lines.push_back(Utf8Encode(std::u32string_view(u).substr(start)));
  return lines;
}

std::string PyReplace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                      size_t max_bytes) {
  std::string out;
  auto check = [&] {
    if (out.size() > max_bytes) {
      throw std::length_error("replace would make a string of more than " + std::to_string(max_bytes >> 20) + " MiB");
    }
  };
  if (old.empty()) {
    // Python inserts repl between every code point (and at both ends).
    std::u32string u = Utf8Decode(s);
    int64_t n = 0;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || n < count) {
        out.append(repl);
        ++n;
      }
      if (k < u.size()) AppendUtf8(out, u[k]);
      check();
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t k = s.find(old, pos);
    if (k == std::string_view::npos) break;
    out.append(s.substr(pos, k - pos));
    out.append(repl);
    check();
    pos = k + old.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t PyCount(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(Utf8Length(s)) + 1;
  int64_t n = 0;
  for (size_t k = s.find(sub); k != std::string_view::npos; k = s.find(sub, k + sub.size())) ++n;
  return n;
}

int64_t PyFind(std::string_view s, std::string_view sub, bool from_right) {
  size_t k = from_right ? s.rfind(sub) : s.find(sub);
  if (k == std::string_view::npos) return -1;
  return static_cast<int64_t>(Utf8Length(s.substr(0, k)));
}

void ResolveSlice(int64_t len, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                  const std::optional<int64_t>& step, int64_t* out_start, int64_t* out_stop,
                  int64_t* out_step) {
  int64_t st = step.value_or(1);
  auto clamp = [&](int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(hi, v)); };
  int64_t b, e;
  if (st > 0) {
    b = start ? (*start < 0 ? clamp(*start + len, 0, len) : clamp(*start, 0, len)) : 0;
    e = stop ? (*stop < 0 ? clamp(*stop + len, 0, len) : clamp(*stop, 0, len)) : len;
  } else {
    b = start ? (*start < 0 ? clamp(*start + len, -1, len - 1) : clamp(*start, -1, len - 1)) : len - 1;
    e = stop ? (*stop < 0 ? clamp(*stop + len, -1, len - 1) : clamp(*stop, -1, len - 1)) : -1;
  }
  *out_start = b;
  *out_stop = e;
  *out_step = st;
}

}  // namespace tandem::chat
