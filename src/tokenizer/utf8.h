// UTF-8 helpers for the tokenizer (private to src/tokenizer).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::tok {

// Appends `in` to `out`, replacing each ill-formed sequence by U+FFFD, one per "maximal subpart"
// (Unicode ch. 3 "U+FFFD substitution of maximal subparts"; what Rust's String::from_utf8_lossy and
// the WHATWG TextDecoder do). When `final` is false, a trailing incomplete but so far valid
// sequence is left unconsumed. Returns the number of bytes of `in` consumed.
size_t AppendUtf8Lossy(std::string_view in, bool final, std::string* out);

bool IsValidUtf8(std::string_view s);

// Decodes the code point at s[*i] of valid UTF-8 and advances *i past it.
char32_t NextCodePoint(std::string_view s, size_t* i);
// Decodes the code point that ends at s[end) of valid UTF-8; *begin receives its first byte.
char32_t PrevCodePoint(std::string_view s, size_t end, size_t* begin);
void AppendCodePoint(char32_t cp, std::string* out);

// Unicode White_Space (what Rust's char::is_whitespace tests).
bool IsWhiteSpace(char32_t cp);
// Letters and numbers (Rust's char::is_alphanumeric, through utf8proc categories).
bool IsAlphanumeric(char32_t cp);

}  // namespace tandem::tok
