// Private to the chat template renderer: Python str semantics over UTF-8 bytes. Python strings
// are sequences of code points, so lengths, indices and slices count code points here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::chat {

std::u32string Utf8Decode(std::string_view s);  // invalid bytes decode as U+FFFD
// The code point at byte i (s[i] exists) as Utf8Decode reads it: *cp, and the bytes it took (1 for
// an invalid byte, which is U+FFFD).
size_t Utf8DecodeOne(std::string_view s, size_t i, char32_t* cp);
std::string Utf8Encode(std::u32string_view s);
void AppendUtf8(std::string& out, char32_t c);
size_t Utf8Length(std::string_view s);
bool IsAscii(std::string_view s);

bool IsPySpace(char32_t c);  // str.isspace()
// Case mapping: ASCII, Latin-1, Greek and Cyrillic basic letters (a documented limit).
char32_t ToLowerCp(char32_t c);
char32_t ToUpperCp(char32_t c);
bool IsCased(char32_t c);
bool IsAlnumCp(char32_t c);

std::string PyLower(std::string_view s);
std::string PyUpper(std::string_view s);
std::string PyTitle(std::string_view s);       // str.title()
std::string PyCapitalize(std::string_view s);  // str.capitalize()
// str.strip/lstrip/rstrip: chars == nullopt strips whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split/rsplit: sep == nullopt splits on whitespace runs; maxsplit < 0 means no limit.
std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right);
std::vector<std::string> PySplitLines(std::string_view s, bool keepends);
// max_bytes: a result growing past it throws std::length_error (the template's string cap).
std::string PyReplace(std::string_view s, std::string_view old, std::string_view repl, int64_t count,
                      size_t max_bytes = static_cast<size_t>(-1));
int64_t PyCount(std::string_view s, std::string_view sub);
// str.find / rfind in code points; -1 when absent.
int64_t PyFind(std::string_view s, std::string_view sub, bool from_right);

// Python slice resolution: fills start/stop/step for a sequence of `len`; step != 0.
void ResolveSlice(int64_t len, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
                  const std::optional<int64_t>& step, int64_t* out_start, int64_t* out_stop,
                  int64_t* out_step);

}  // namespace tandem::chat
