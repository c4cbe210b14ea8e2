// Shared helpers of the tokenizer tests.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "tokenizer/tokenizer.h"

namespace tandem::testing {

// The bundled Qwen3 tokenizer, loaded once.
inline std::shared_ptr<const Tokenizer> QwenTokenizer() {
  static std::shared_ptr<const Tokenizer> tok = [] {
    auto r = Tokenizer::Load(DefaultModelDir());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : nullptr;
  }();
  return tok;
}

inline nlohmann::json Golden(const std::string& name) {
  auto r = ReadJsonFile(std::string(TANDEM_GOLDEN_DIR) + "/" + name);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r.value() : nlohmann::json();
}

// True if `s` is well-formed UTF-8 (no partial character).
inline bool IsWellFormedUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b < 0x80) need = 0;
    else if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) { need = 2; lo = 0xA0; }
    else if (b == 0xED) { need = 2; hi = 0x9F; }
    else if (b >= 0xE1 && b <= 0xEF) need = 2;
    else if (b == 0xF0) { need = 3; lo = 0x90; }
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else if (b == 0xF4) { need = 3; hi = 0x8F; }
    else return false;
    if (need > 0 && i + need >= s.size()) return false;
    for (int k = 1; k <= need; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
    }
    i += need + 1;
  }
  return true;
}

}  // namespace tandem::testing
