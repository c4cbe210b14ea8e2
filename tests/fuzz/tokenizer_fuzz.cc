// The bundled model's tokenizer (models/tiny-qwen3/tokenizer.json): Encode of any bytes, with and
// without special tokens parsed, with literal ranges; and the incremental detokenizer over any
// sequence of valid ids, against its contract (tokenizer.h): the pushed pieces and Flush
// concatenate to Decode(ids), and a piece never ends inside a UTF-8 character.
//
// The first byte picks: even -> encode the rest; odd -> the rest as little-endian u16/u24 ids
// (mod the vocabulary) pushed one at a time, bit 1 of the first byte: skip_special_tokens.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

using namespace tandem;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "tokenizer_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

const std::shared_ptr<const Tokenizer>& TheTokenizer() {
  static std::shared_ptr<const Tokenizer> tok = [] {
    auto t = Tokenizer::Load(TANDEM_DEFAULT_MODEL_DIR);
    if (!t.ok()) {
      fprintf(stderr, "tokenizer_fuzz: cannot load %s: %s\n", TANDEM_DEFAULT_MODEL_DIR,
              t.status().ToString().c_str());
      abort();
    }
    return *t;
  }();
  return tok;
}

// True when `s` ends inside a multi-byte UTF-8 sequence that could still be completed.
bool EndsInsideCharacter(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    unsigned char c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  TheTokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& tok = TheTokenizer();
  const int32_t vocab = tok->vocab_size();
  const uint8_t mode = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((mode & 1) == 0) {
    EncodeOptions options;
    options.parse_special = mode & 2;
    if (mode & 4) {  // a literal range over the middle third
      options.literal_ranges.push_back({rest.size() / 3, 2 * rest.size() / 3});
    }
    std::vector<int32_t> ids = tok->Encode(rest, options);
    for (int32_t id : ids) Check(id >= 0 && id < vocab, "an encoded id out of the vocabulary");
    Check(rest.empty() == ids.empty(), "text and its ids disagree on emptiness");
    std::string decoded = tok->Decode(ids, false);
    if (!options.parse_special) {
      // Without special tokens the ids are the text's bytes (NFC-normalized): never fewer tokens
      // of text than needed for its length, so at least the decoded text is non-empty.
      Check(rest.empty() || !decoded.empty(), "non-empty text decoded to nothing");
    }
    return 0;
  }
  const bool skip_special = mode & 2;
  const size_t width = (mode & 4) ? 3 : 2;
  std::vector<int32_t> ids;
  for (size_t i = 0; i + width <= rest.size(); i += width) {
    uint32_t v = 0;
    for (size_t b = 0; b < width; ++b) v |= static_cast<uint32_t>(static_cast<uint8_t>(rest[i + b])) << (8 * b);
    ids.push_back(static_cast<int32_t>(v % static_cast<uint32_t>(vocab)));
  }
  IncrementalDetokenizer detok(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    std::string piece = detok.Push(id);
    Check(!EndsInsideCharacter(piece), "a pushed piece ends inside a UTF-8 character");
    streamed += piece;
  }
  streamed += detok.Flush();
  Check(streamed == tok->Decode(ids, skip_special), "pushed pieces + Flush != Decode(ids)");
  return 0;
}
