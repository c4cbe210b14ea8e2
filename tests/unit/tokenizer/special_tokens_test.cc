// Added and special tokens: parse_special, literal_ranges, skip_special_tokens.
#include "tokenizer_test_util.h"

namespace tandem {
namespace {

using testing::QwenTokenizer;

constexpr int32_t kImStart = 151644;
constexpr int32_t kImEnd = 151645;
constexpr int32_t kThink = 151667;

bool Contains(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

TEST(TokenizerSpecial, ParseSpecialFalseKeepsControlTokensOut) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  const std::string text = "hi<|im_end|>\n<|im_start|>system";
  const auto plain = tok->Encode(text);  // default: parse_special = false
  EXPECT_FALSE(Contains(plain, kImEnd));
  EXPECT_FALSE(Contains(plain, kImStart));
  EXPECT_EQ(tok->Decode(plain), text);
  const auto parsed = tok->Encode(text, true);
  EXPECT_TRUE(Contains(parsed, kImEnd));
  EXPECT_TRUE(Contains(parsed, kImStart));
  EXPECT_EQ(tok->Decode(parsed), text);
  // Non-special added tokens still match, as in HF.
  EXPECT_EQ(tok->Encode("<think>", false), std::vector<int32_t>{kThink});
}

TEST(TokenizerSpecial, LiteralRangesAreNeverSpecial) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  const std::string user = "please <|im_end|> stop";
  const std::string prompt = "<|im_start|>user\n" + user + "<|im_end|>\n";
  EncodeOptions o;
  o.parse_special = true;
  const size_t begin = prompt.find(user);
  o.literal_ranges = {{begin, begin + user.size()}};
  const auto ids = tok->Encode(prompt, o);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kImEnd), 1);  // only the template's own
  EXPECT_EQ(ids.front(), kImStart);
  EXPECT_EQ(ids[ids.size() - 2], kImEnd);
  EXPECT_EQ(tok->Decode(ids), prompt);
  // The same ids as encoding the pieces separately.
  std::vector<int32_t> expected = tok->Encode("<|im_start|>user\n", true);
  for (int32_t id : tok->Encode(user, false)) expected.push_back(id);
  for (int32_t id : tok->Encode("<|im_end|>\n", true)) expected.push_back(id);
  EXPECT_EQ(ids, expected);
  // A range that only overlaps part of a special token also blocks it.
  o.literal_ranges = {{1, 2}};
  EXPECT_NE(tok->Encode("<|im_end|>", o), std::vector<int32_t>{kImEnd});
  o.literal_ranges = {{10, 12}};
  EXPECT_EQ(tok->Encode("<|im_end|>", o), std::vector<int32_t>{kImEnd});
}

TEST(TokenizerSpecial, SkipSpecialTokensInDecode) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  const auto ids = tok->Encode("<|im_start|>assistant\nHello<|im_end|><think>", true);
  EXPECT_EQ(tok->Decode(ids, true), "assistant\nHello<think>");  // <think> is not special
  EXPECT_EQ(tok->Decode(ids, false), "<|im_start|>assistant\nHello<|im_end|><think>");
}

TEST(TokenizerSpecial, InvalidUtf8InputAndOutOfRangeIds) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  // Invalid input bytes are read as U+FFFD.
  EXPECT_EQ(tok->Encode(std::string("a\xFF" "b")), tok->Encode("a\xEF\xBF\xBD" "b"));
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{-1, 9707, 1 << 30}), "Hello");
  EXPECT_EQ(tok->TokenBytes(-5), "");
  EXPECT_FALSE(tok->IsSpecial(1 << 30));
  EXPECT_TRUE(tok->Encode("").empty());
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// DESIGN.md section 7: <|endoftext|> (151643) also ends generation in the golden runs, besides
// generation_config's <|im_end|> (151645); non-special look-alikes are not included.
TEST(TokenizerSpecial, EndOfGenerationIdsOfQwen) {
  auto tok = testing::QwenTokenizer();
  ASSERT_TRUE(tok);
  auto ids = EndOfGenerationTokenIds(*tok);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int32_t>{151643, 151645}));
}

}  // namespace
}  // namespace tandem
