#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace tandem::tok {

namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, 324> char_to_byte{};  // all code points of the alphabet are < 256 + 68
  Tables() {
    char_to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      // Printable bytes stand for themselves; the others get 256, 257, ... in byte order.
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      byte_to_char[b] = c;
      char_to_byte[c] = static_cast<int16_t>(b);
    }
  }
};

const Tables& T() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteToChar(unsigned char b) { return T().byte_to_char[b]; }

int CharToByte(char32_t c) { return c < T().char_to_byte.size() ? T().char_to_byte[c] : -1; }

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) AppendCodePoint(ByteToChar(b), &out);
  return out;
}

// Every character of the alphabet is below U+0800: one or two UTF-8 bytes. Anything else (a longer
// or ill-formed sequence, a character outside the alphabet) makes the string not byte-level.
bool ByteLevelToBytes(std::string_view token, std::string* out) {
  const Tables& t = T();
  out->resize(token.size());  // at most one byte per byte of the token
  size_t n = 0;
  for (size_t i = 0; i < token.size();) {
    const auto c0 = static_cast<unsigned char>(token[i]);
    char32_t c;
    if (c0 < 0x80) {
      c = c0;
      i += 1;
    } else if (c0 >= 0xC2 && c0 <= 0xDF && i + 1 < token.size() &&
               (static_cast<unsigned char>(token[i + 1]) & 0xC0) == 0x80) {
      c = (static_cast<char32_t>(c0 & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;
    }
    const int b = c < t.char_to_byte.size() ? t.char_to_byte[c] : -1;
    if (b < 0) return false;
    (*out)[n++] = static_cast<char>(b);
  }
  out->resize(n);
  return true;
}

}  // namespace tandem::tok
