// TokenMasker (token_mask.h): the cached mask equals one uncached walk of the vocabulary and the
// brute-force answer (each token's bytes tried on the Matcher), along random generations under a
// JSON grammar, on a small vocabulary and on the bundled model's Qwen3 vocabulary (151,669 ids).
// Stop tokens only where the grammar may end; special tokens never. The same with the node caches
// filled by MaskPrecomputer (mask_precompute.h) before the generations, and while they run.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/mask_precompute.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace tandem::grammar {
namespace {

using testing::JsonGbnf;

std::shared_ptr<const Automaton> Compile(const std::string& gbnf) {
  auto g = ParseGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  auto a = Automaton::Compile(*g);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::make_shared<const Automaton>(std::move(*a));
}

std::vector<uint32_t> BruteForce(Matcher& m, const TokenVocab& v, const std::vector<char>& special) {
  std::vector<uint32_t> mask(v.mask_words(), 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    if (special[id] || v.bytes(id).empty()) continue;
    if (m.CanAccept(v.bytes(id))) mask[id / 32] |= 1u << (id % 32);
  }
  if (m.IsAccepting()) {
    for (int32_t id : v.stop_ids()) mask[id / 32] |= 1u << (id % 32);
  }
  return mask;
}

bool Allowed(const std::vector<uint32_t>& mask, int32_t id) { return mask[id / 32] >> (id % 32) & 1; }

// How the masker's node caches are filled: by Fill's first visits, by a MaskPrecomputer before
// the generations (Drain), or by one racing them on its thread.
enum class Cache { kLazy, kPrecomputed, kRacing };

// Random generations: at each step the three masks agree; the next token is drawn among the
// allowed ones (stop tokens ending the generation).
void CheckGenerations(std::shared_ptr<const TokenVocab> vocab, const std::vector<char>& special,
                      std::shared_ptr<const Automaton> automaton, int generations, int steps,
                      int brute_every, Cache cache = Cache::kLazy) {
  auto shared = std::make_shared<TokenMasker>(vocab, automaton);
  TokenMasker& masker = *shared;
  MaskPrecomputer precompute;
  if (cache != Cache::kLazy) precompute.Add(shared);
  if (cache == Cache::kPrecomputed) {
    precompute.Drain();
    size_t with_bytes = 0;
    for (size_t n = 0; n < automaton->num_nodes(); ++n) with_bytes += !automaton->node(n).bytes.empty();
    EXPECT_EQ(masker.cached_nodes(), with_bytes);
  }
  std::mt19937 rng(5);
  std::vector<uint32_t> cached(vocab->mask_words()), uncached(vocab->mask_words());
  int checked = 0;
  for (int g = 0; g < generations; ++g) {
    Matcher m(automaton);
    for (int step = 0; step < steps; ++step) {
      masker.Fill(m, cached.data());
      masker.FillUncached(m, uncached.data());
      ASSERT_EQ(cached, uncached) << "generation " << g << " step " << step;
      if (step % brute_every == 0) {
        ASSERT_EQ(cached, BruteForce(m, *vocab, special)) << "generation " << g << " step " << step;
        ++checked;
      }
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (Allowed(cached, id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      for (int32_t id : vocab->stop_ids()) ASSERT_EQ(Allowed(cached, id), m.IsAccepting());
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (special[id]) {
          ASSERT_TRUE(!Allowed(cached, id) || m.IsAccepting());
        }
      }
      const int32_t next = allowed[rng() % allowed.size()];
      bool stop = false;
      for (int32_t id : vocab->stop_ids()) stop = stop || id == next;
      if (stop) break;
      ASSERT_TRUE(m.Accept(vocab->bytes(next)));
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(TokenMaskTest, SmallVocabularyAgreesWithBruteForce) {
  std::vector<std::string> tokens = {"<eos>", "<ctl>", "{", "}", "[", "]", ",", ":", " ", "\"",
                                     "\"a", "a\"", "\":", "{\"", "\"}", "tr", "ue", "true", "null",
                                     "nu", "ll", "1", "12", "-", ".", "5e", "e", "+", "0", "\\",
                                     "\\n", "\\u", "00", "e9", "é", "\xC3", "\xA9", "\n", "},{",
                                     "]]", "[[", "a", "bc", "\": \"", "\"]"};
  std::vector<char> special(tokens.size(), 0);
  special[0] = special[1] = 1;
  auto vocab = std::make_shared<const TokenVocab>(tokens, std::vector<int32_t>{0, 1},
                                                  std::vector<int32_t>{0});
  CheckGenerations(vocab, special, Compile(JsonGbnf()), 40, 60, 1);
}

TEST(TokenMaskTest, QwenVocabularyAgreesWithBruteForce) {
  auto tok = Tokenizer::Load(TANDEM_SOURCE_DIR "/models/tiny-qwen3");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  std::vector<int32_t> stops = EndOfGenerationTokenIds(**tok);
  ASSERT_FALSE(stops.empty());
  auto vocab = TokenVocab::FromTokenizer(**tok, stops);
  std::vector<char> special(vocab->size(), 0);
  for (int32_t id = 0; id < vocab->size(); ++id) special[id] = (*tok)->IsSpecial(id);
  CheckGenerations(vocab, special, Compile(JsonGbnf()), 3, 40, 8);
}

TEST(TokenMaskTest, PrecomputedAndRacingCachesAgreeWithBruteForce) {
  auto tok = Tokenizer::Load(TANDEM_SOURCE_DIR "/models/tiny-qwen3");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto vocab = TokenVocab::FromTokenizer(**tok, EndOfGenerationTokenIds(**tok));
  std::vector<char> special(vocab->size(), 0);
  for (int32_t id = 0; id < vocab->size(); ++id) special[id] = (*tok)->IsSpecial(id);
  // Bounded strings (nodes that accept most tokens: bitmask caches) beside structure (few: ids).
  auto g = JsonSchemaToGrammar(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12}, "n": {"type": "integer", "minimum": 0},
      "tags": {"type": "array", "items": {"enum": ["a", "b c"]}, "maxItems": 3}},
      "required": ["name", "n", "tags"], "additionalProperties": false})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto a = Automaton::Compile(*g);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto automaton = std::make_shared<const Automaton>(std::move(*a));
  CheckGenerations(vocab, special, automaton, 3, 40, 8, Cache::kPrecomputed);
  CheckGenerations(vocab, special, automaton, 3, 40, 8, Cache::kRacing);
  CheckGenerations(vocab, special, Compile(JsonGbnf()), 2, 40, 8, Cache::kRacing);
}

// A precomputer destroyed while it works stops and joins; the masker it was filling stays whole:
// its masks still equal one uncached walk.
TEST(TokenMaskTest, PrecomputerStopsOnDestruction) {
  auto tok = Tokenizer::Load(TANDEM_SOURCE_DIR "/models/tiny-qwen3");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto vocab = TokenVocab::FromTokenizer(**tok, EndOfGenerationTokenIds(**tok));
  auto automaton = Compile(JsonGbnf());
  auto masker = std::make_shared<TokenMasker>(vocab, automaton);
  {
    MaskPrecomputer precompute;
    precompute.Add(masker);
  }
  Matcher m(automaton);
  std::vector<uint32_t> cached(vocab->mask_words()), uncached(vocab->mask_words());
  for (const char* bytes : {"{", "\"k", "\": [", "1, tr"}) {
    ASSERT_TRUE(m.Accept(bytes)) << bytes;
    masker->Fill(m, cached.data());
    masker->FillUncached(m, uncached.data());
    EXPECT_EQ(cached, uncached) << bytes;
  }
}

}  // namespace
}  // namespace tandem::grammar
