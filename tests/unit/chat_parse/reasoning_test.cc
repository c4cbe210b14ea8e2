// Reasoning parsers on hand-written outputs in the models' own formats (Qwen3's
// "<think>\n...\n</think>\n\n", DeepSeek-R1's output after the prompt's "<think>\n"), and the
// streaming parser over every split of each into deltas.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "chat_parse/reasoning.h"

namespace tandem::chat_parse {
namespace {

struct Case {
  ReasoningFormat format;
  std::string text;
  std::string reasoning;
  std::string content;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      // Qwen3 (thinking on): the tiny model's empty block, and a real-looking one.
      {ReasoningFormat::kQwen3, "<think>\n\n</think>\n\nIn recent months several", "", "In recent months several"},
      {ReasoningFormat::kQwen3,
       "<think>\nOkay, the user asks for 2+2. That is 4.\n</think>\n\nThe answer is **4**.",
       "Okay, the user asks for 2+2. That is 4.", "The answer is **4**."},
      {ReasoningFormat::kQwen3, "<think>\nstill thinking when max_tokens hit", "still thinking when max_tokens hit", ""},
      {ReasoningFormat::kQwen3, "<think>\na < b and </thin k> is not a tag\n</think>\n\nok",
       "a < b and </thin k> is not a tag", "ok"},
      // enable_thinking=false: the prompt holds the empty block, the output is the answer.
      {ReasoningFormat::kQwen3, "Hello! How can I help?\n", "", "Hello! How can I help?\n"},
      {ReasoningFormat::kQwen3, "<thin", "", "<thin"},
      {ReasoningFormat::kQwen3, "", "", ""},
      {ReasoningFormat::kQwen3, "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "",
       "<tool_call>\n{\"name\": \"f\"}\n</tool_call>"},
      // DeepSeek-R1: the template opens "<think>\n", the output starts inside the reasoning.
      {ReasoningFormat::kDeepSeekR1,
       "Let me compute 17*3. 17*3 = 51.\n</think>\n\n17 × 3 = **51**", "Let me compute 17*3. 17*3 = 51.",
       "17 × 3 = **51**"},
      {ReasoningFormat::kDeepSeekR1, "<think>\nhmm\n</think>\n\nyes", "hmm", "yes"},
      {ReasoningFormat::kDeepSeekR1, "no end tag, all reasoning", "no end tag, all reasoning", ""},
      {ReasoningFormat::kNone, "<think>\nx\n</think>\n\ny", "", "<think>\nx\n</think>\n\ny"},
      // A stray tag in the answer never reaches the content.
      {ReasoningFormat::kQwen3, "Answer <think>x</think> end", "", "Answer x end"},
      {ReasoningFormat::kDeepSeekR1, "r</think>a</think>b<thi", "r", "ab<thi"},
      // Found by tool_call_parse_fuzz: dropping a tag must not join the text around it into one.
      {ReasoningFormat::kQwen3, "ok <t<think>hink> x", "", "ok  x"},
  };
  return cases;
}

ReasoningDelta Stream(ReasoningFormat format, const std::vector<std::string>& pieces) {
  ReasoningParser p(format);
  ReasoningDelta all;
  for (const std::string& piece : pieces) {
    ReasoningDelta d = p.Feed(piece);
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ReasoningDelta d = p.Finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

TEST(ReasoningParser, WholeText) {
  for (const Case& c : Cases()) {
    ReasoningDelta d = ReasoningParser::Split(c.format, c.text);
    EXPECT_EQ(d.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(d.content, c.content) << c.text;
  }
}

TEST(ReasoningParser, EverySplitPointAndByteByByte) {
  for (const Case& c : Cases()) {
    for (size_t k = 0; k <= c.text.size(); ++k) {
      ReasoningDelta d = Stream(c.format, {c.text.substr(0, k), c.text.substr(k)});
      EXPECT_EQ(d.reasoning, c.reasoning) << c.text << " split at " << k;
      EXPECT_EQ(d.content, c.content) << c.text << " split at " << k;
    }
    std::vector<std::string> bytes;
    for (char ch : c.text) bytes.emplace_back(1, ch);
    ReasoningDelta d = Stream(c.format, bytes);
    EXPECT_EQ(d.reasoning, c.reasoning) << c.text;
    EXPECT_EQ(d.content, c.content) << c.text;
  }
}

TEST(ReasoningParser, RandomSplits) {
  std::mt19937 rng(25);
  for (const Case& c : Cases()) {
    for (int round = 0; round < 200; ++round) {
      std::vector<std::string> pieces;
      size_t i = 0;
      while (i < c.text.size()) {
        size_t n = std::uniform_int_distribution<size_t>(0, 9)(rng);
        pieces.push_back(c.text.substr(i, n));
        i += n;
      }
      ReasoningDelta d = Stream(c.format, pieces);
      ASSERT_EQ(d.reasoning, c.reasoning) << c.text;
      ASSERT_EQ(d.content, c.content) << c.text;
    }
  }
}

TEST(ReasoningParser, NoTagReachesContentWhileStreaming) {
  // The tags arrive as tokens ("<think>", "\n\n", "</think>", "\n\n"), or cut anywhere: no content
  // delta ever holds a piece of them.
  const std::string text = "<think>\n\n</think>\n\nHi";
  for (size_t k = 1; k < text.size(); ++k) {
    ReasoningParser p(ReasoningFormat::kQwen3);
    std::string content = p.Feed(text.substr(0, k)).content;
    content += p.Feed(text.substr(k)).content;
    content += p.Finish().content;
    EXPECT_EQ(content, "Hi");
  }
}

TEST(ReasoningParser, InReasoningFollowsTheTags) {
  ReasoningParser p(ReasoningFormat::kQwen3);
  EXPECT_FALSE(p.InReasoning());
  p.Feed("<think>");
  EXPECT_TRUE(p.InReasoning());
  p.Feed("\n\n");
  EXPECT_TRUE(p.InReasoning());
  p.Feed("</think>");
  EXPECT_FALSE(p.InReasoning());
  ReasoningParser r1(ReasoningFormat::kDeepSeekR1);
  r1.Feed("x");
  EXPECT_TRUE(r1.InReasoning());
}

TEST(ReasoningParser, Names) {
  EXPECT_EQ(ParseReasoningFormat("qwen3"), ReasoningFormat::kQwen3);
  EXPECT_EQ(ParseReasoningFormat("deepseek_r1"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(ParseReasoningFormat("none"), ReasoningFormat::kNone);
  EXPECT_FALSE(ParseReasoningFormat("qwen"));
  EXPECT_STREQ(ReasoningFormatName(ReasoningFormat::kDeepSeekR1), "deepseek_r1");
}

}  // namespace
}  // namespace tandem::chat_parse
