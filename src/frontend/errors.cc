#include "frontend/errors.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tandem::http {

std::string OpenAIErrorBody(std::string_view message, std::string_view type,
                            std::string_view param, std::string_view code) {
  nlohmann::json error = {
      {"message", std::string(message)},
      {"type", std::string(type)},
      {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(param))},
      {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(code))},
  };
  nlohmann::json body = {{"error", std::move(error)}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// The length of the UTF-8 sequence starting at text[i] (1..4) and its code point; 0 when invalid.
size_t Utf8Sequence(std::string_view text, size_t i, uint32_t* cp) {
  const auto b = static_cast<unsigned char>(text[i]);
  size_t len = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
  if (len == 0 || b > 0xF4 || i + len > text.size()) return 0;
  uint32_t c = b & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto cb = static_cast<unsigned char>(text[i + k]);
    if ((cb & 0xC0) != 0x80) return 0;
    c = (c << 6) | (cb & 0x3F);
  }
  const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return len;
}

}  // namespace

std::string ClientText(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes) + 8);
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) {
      if (i + 1 > max_bytes) break;
      if (b == '\n') out += "\\n";
      else if (b == '\r') out += "\\r";
      else if (b == '\t') out += "\\t";
      else if (b < 0x20 || b == 0x7F) out += fmt::format("\\x{:02x}", b);
      else out += static_cast<char>(b);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t len = Utf8Sequence(text, i, &cp);
    if (i + std::max<size_t>(len, 1) > max_bytes) break;
    if (len == 0) {
      out += fmt::format("\\x{:02x}", b);
      ++i;
    } else {
      if (cp < 0xA0) out += fmt::format("\\u{:04x}", cp);  // C1 controls (0x9B is a CSI)
      else out.append(text.substr(i, len));
      i += len;
    }
  }
  if (i < text.size()) out += "...";
  return out;
}

}  // namespace tandem::http
