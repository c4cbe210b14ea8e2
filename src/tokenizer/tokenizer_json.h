// Fast reading of tokenizer.json: a SAX pass that builds a DOM for everything except the two large
// members model.vocab and model.merges, which go straight into vectors (a full DOM of the 11 MB
// Qwen file takes ~5x longer).
#pragma once

#include <cstdint>
#include <memory>
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

// A read-only memory map of a whole file (cheaper than copying 11 MB on these VMs).
class MappedFile {
 public:
  // NotFound if missing; DataLoss if it cannot be read.
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  std::string_view data() const { return {static_cast<const char*>(addr_), size_}; }

 private:
  MappedFile() = default;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tandem::tok
