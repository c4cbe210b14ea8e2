#include "tokenizer/utf8.h"

#include <utf8proc.h>

namespace tandem::tok {

namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// For a lead byte: number of continuation bytes and the allowed range of the first one.
// Returns false for bytes that can never start a character.
bool LeadInfo(unsigned char b, int* need, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    *need = 1;
  } else if (b == 0xE0) {
    *need = 2;
    *lo = 0xA0;
  } else if (b == 0xED) {
    *need = 2;
    *hi = 0x9F;
  } else if (b >= 0xE1 && b <= 0xEF) {
    *need = 2;
  } else if (b == 0xF0) {
    *need = 3;
    *lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) {
    *need = 3;
  } else if (b == 0xF4) {
    *need = 3;
    *hi = 0x8F;
  } else {
    return false;
  }
  return true;
}

}  // namespace

size_t AppendUtf8Lossy(std::string_view in, bool final, std::string* out) {
  const size_t n = in.size();
  size_t i = 0;
  while (i < n) {
    // Copy a run of ASCII at once.
    size_t run = i;
    while (run < n && static_cast<unsigned char>(in[run]) < 0x80) ++run;
    if (run > i) {
      out->append(in.data() + i, run - i);
      i = run;
      if (i == n) break;
    }
    const auto b = static_cast<unsigned char>(in[i]);
    int need;
    unsigned char lo, hi;
    if (!LeadInfo(b, &need, &lo, &hi)) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    size_t j = i + 1;
    bool bad = false;
    for (int k = 0; k < need; ++k, ++j) {
      if (j >= n) {
        if (!final) return i;  // incomplete: wait for more bytes
        bad = true;
        break;
      }
      const auto c = static_cast<unsigned char>(in[j]);
      if (c < (k == 0 ? lo : 0x80) || c > (k == 0 ? hi : 0xBF)) {
        bad = true;
        break;
      }
    }
    if (bad) {
      out->append(kReplacement);  // the maximal subpart in[i, j) becomes one U+FFFD
      i = j;
      continue;
    }
    out->append(in.data() + i, j - i);
    i = j;
  }
  return n;
}

bool IsValidUtf8(std::string_view s) {
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    int need;
    unsigned char lo, hi;
    if (!LeadInfo(b, &need, &lo, &hi) || i + need >= n) return false;
    for (int k = 1; k <= need; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
    }
    i += need + 1;
  }
  return true;
}

char32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto b = static_cast<unsigned char>(s[*i]);
  if (b < 0x80) {
    ++*i;
    return b;
  }
  int len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> len);
  for (int k = 1; k < len && *i + k < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  }
  *i += len;
  return cp;
}

char32_t PrevCodePoint(std::string_view s, size_t end, size_t* begin) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  *begin = b;
  size_t i = b;
  return NextCodePoint(s, &i);
}

void AppendCodePoint(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsWhiteSpace(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool IsAlphanumeric(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

}  // namespace tandem::tok
