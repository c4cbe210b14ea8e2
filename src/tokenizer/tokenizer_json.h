// Fast reading of tokenizer.json: a SAX pass that builds a DOM for everything except the two large
// members model.vocab and model.merges, which go straight into vectors (a full DOM of the 11 MB
// Qwen file takes ~5x longer).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::tok {

struct TokenizerJson {
  nlohmann::json rest;  // the document with model.vocab = {} and model.merges = [] emptied
  std::vector<std::pair<std::string, int64_t>> vocab;         // in file order
  std::vector<std::pair<std::string, std::string>> merges;    // "a b" strings split at the space
  std::vector<std::string> bad_entries;  // vocab values that are not integers, malformed merges
};

// InvalidArgument (with the parser's message) if `text` is not valid JSON.
Result<TokenizerJson> ParseTokenizerJson(std::string_view text, const std::string& name);

// Whole file; NotFound if missing.
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace tandem::tok
