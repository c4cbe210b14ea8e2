// The tokenizer against the Hugging Face reference runs in tests/golden/.
#include <chrono>

#include "tokenizer_test_util.h"

namespace tandem {
namespace {

using testing::Golden;
using testing::QwenTokenizer;

std::vector<int32_t> Ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

TEST(TokenizerGolden, LoadsQuicklyAndKnowsItsVocab) {
  const auto start = std::chrono::steady_clock::now();
  auto r = Tokenizer::Load(DefaultModelDir());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::printf("tokenizer load: %.0f ms\n", ms);
  const auto& tok = *r.value();
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.TokenToId("<|im_end|>"), 151645);
  EXPECT_EQ(tok.TokenToId("Hello"), 9707);
  EXPECT_EQ(tok.TokenToId("Ġworld"), 1879);
  EXPECT_FALSE(tok.TokenToId("no such token here").has_value());
  EXPECT_TRUE(tok.IsSpecial(151645));
  EXPECT_FALSE(tok.IsSpecial(9707));
  EXPECT_FALSE(tok.IsSpecial(151657));  // <tool_call> is an added token that is not special
  EXPECT_EQ(tok.TokenBytes(1879), " world");
  EXPECT_EQ(tok.TokenBytes(151645), "<|im_end|>");
}

TEST(TokenizerGolden, TokenizerCases) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  const auto golden = Golden("tiny-qwen3.json");
  int n = 0;
  for (const auto& c : golden.at("tokenizer")) {
    const std::string text = c.at("text");
    EXPECT_EQ(tok->Encode(text, /*parse_special=*/true), Ids(c.at("ids"))) << "text: " << text;
    const auto ids = Ids(c.at("ids"));
    EXPECT_EQ(tok->Decode(ids), c.at("decoded").get<std::string>()) << "text: " << text;
    ++n;
  }
  EXPECT_GE(n, 10);
}

TEST(TokenizerGolden, GenerationPrompts) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  const auto golden = Golden("tiny-qwen3.json");
  for (const auto& c : golden.at("generation")) {
    const std::string rendered = c.at("rendered");
    EXPECT_EQ(tok->Encode(rendered, true), Ids(c.at("prompt_ids"))) << "rendered: " << rendered;
    // The greedy continuation decodes to the reference text.
    EXPECT_EQ(tok->Decode(Ids(c.at("greedy_ids")), /*skip_special_tokens=*/true), c.at("greedy_text").get<std::string>());
  }
}

TEST(TokenizerGolden, LongPrompts) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  const auto golden = Golden("tiny-qwen3-long.json");
  int n = 0;
  for (const auto& c : golden.at("generation_long")) {
    const std::string prompt = c.at("prompt");
    const auto expected = Ids(c.at("prompt_ids"));
    const auto start = std::chrono::steady_clock::now();
    const auto ids = tok->Encode(prompt, c.value("chat", false));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("encode %zu bytes -> %zu tokens: %.2f ms\n", prompt.size(), ids.size(), ms);
    ASSERT_EQ(ids.size(), expected.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_EQ(ids[i], expected[i]) << "first mismatch at token " << i;
    }
    EXPECT_EQ(tok->Decode(ids), prompt);
    EXPECT_EQ(tok->Decode(Ids(c.at("greedy_ids")), /*skip_special_tokens=*/true), c.at("greedy_text").get<std::string>());
    ++n;
  }
  EXPECT_GE(n, 1);
}

}  // namespace
}  // namespace tandem
