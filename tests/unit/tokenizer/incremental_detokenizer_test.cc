// IncrementalDetokenizer: Push()+Flush() concatenated equals Decode(); no chunk holds a partial
// UTF-8 character.
#include <random>

#include "tokenizer_test_util.h"

namespace tandem {
namespace {

using testing::IsWellFormedUtf8;
using testing::QwenTokenizer;

void CheckStream(const std::shared_ptr<const Tokenizer>& tok, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer detok(tok, skip);
  std::string all;
  for (int32_t id : ids) {
    const std::string chunk = detok.Push(id);
    ASSERT_TRUE(IsWellFormedUtf8(chunk)) << "partial character in a chunk after id " << id;
    all += chunk;
  }
  const std::string tail = detok.Flush();
  ASSERT_TRUE(IsWellFormedUtf8(tail));
  all += tail;
  ASSERT_EQ(all, tok->Decode(ids, skip));
}

TEST(IncrementalDetokenizer, TextSplitAcrossTokens) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  const char* texts[] = {"emoji 😀🎉👍🏽 and flags 🇺🇸 👨‍👩‍👧‍👦", "中文分词测试，你好世界！", "日本語のテキスト",
                         "<|im_start|>user\nhi 🤷🏻‍♀️<|im_end|>", "café naïve résumé", "नमस्ते दुनिया", "plain ascii"};
  for (const char* text : texts) {
    const auto ids = tok->Encode(text, true);
    CheckStream(tok, ids, false);
    CheckStream(tok, ids, true);
  }
  // " 🇺🇸" is cut inside "🇺" by the real BPE (golden: 11162, 229, 118, 145383): a Push holds bytes back.
  const auto ids = tok->Encode(" 🇺🇸");
  ASSERT_EQ(ids, (std::vector<int32_t>{11162, 229, 118, 145383}));
  IncrementalDetokenizer detok(tok, false);
  EXPECT_EQ(detok.Push(ids[0]), " ");
  EXPECT_EQ(detok.Push(ids[1]), "");
  EXPECT_EQ(detok.Push(ids[2]), "🇺");
  EXPECT_EQ(detok.Push(ids[3]), "🇸");
}

TEST(IncrementalDetokenizer, RandomIdSequences) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  // Byte tokens (ids of single bytes 0x80..0xFF) make cut and ill-formed characters likely.
  std::vector<int32_t> byte_ids;
  for (int b = 0x80; b < 0x100; ++b) {
    for (int32_t id = 0; id < 300; ++id) {
      if (tok->TokenBytes(id) == std::string(1, static_cast<char>(b))) byte_ids.push_back(id);
    }
  }
  ASSERT_EQ(byte_ids.size(), 128u);
  std::mt19937 rng(12345);
  for (int n = 0; n < 2000; ++n) {
    std::vector<int32_t> ids;
    for (int k = std::uniform_int_distribution<int>(1, 24)(rng); k > 0; --k) {
      if (rng() % 2) {
        ids.push_back(byte_ids[rng() % byte_ids.size()]);
      } else {
        ids.push_back(std::uniform_int_distribution<int32_t>(0, tok->vocab_size() - 1)(rng));
      }
    }
    CheckStream(tok, ids, n % 2 == 0);
  }
}

TEST(IncrementalDetokenizer, IllFormedBytesBecomeReplacementCharacters) {
  auto tok = QwenTokenizer();
  ASSERT_TRUE(tok);
  auto byte_id = [&](unsigned char b) {
    for (int32_t id = 0; id < 300; ++id) {
      if (tok->TokenBytes(id) == std::string(1, static_cast<char>(b))) return id;
    }
    return -1;
  };
  const std::string fffd = "\xEF\xBF\xBD";
  // E4 B8 (cut "中") then "a": one U+FFFD for the maximal subpart, as from_utf8_lossy.
  std::vector<int32_t> ids = {byte_id(0xE4), byte_id(0xB8), *tok->TokenToId("a")};
  EXPECT_EQ(tok->Decode(ids), fffd + "a");
  // F0 80: F0 cannot be followed by 80 -> two replacements.
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{byte_id(0xF0), byte_id(0x80)}), fffd + fffd);
  // A cut character at the very end.
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{*tok->TokenToId("a"), byte_id(0xE4), byte_id(0xB8)}), "a" + fffd);
  IncrementalDetokenizer detok(tok, false);
  EXPECT_EQ(detok.Push(*tok->TokenToId("a")), "a");
  EXPECT_EQ(detok.Push(byte_id(0xE4)), "");
  EXPECT_EQ(detok.Push(byte_id(0xB8)), "");
  EXPECT_EQ(detok.Push(byte_id(0xAD)), "中");
  EXPECT_EQ(detok.Push(byte_id(0xE4)), "");
  EXPECT_EQ(detok.Flush(), fffd);
  EXPECT_EQ(detok.Flush(), "");
}

}  // namespace
}  // namespace tandem
