// Matcher (matcher.h) on regular grammars against PCRE2 (pcre2_oracle.h): for random strings over
// each case's pieces, the grammar matches the whole string exactly when PCRE2 does, and a string
// can still be extended exactly when PCRE2 reports a (partial) match. The PCRE2 patterns are
// the cases' oracles: another engine's reading of the same language.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "pcre2_oracle.h"

namespace tandem::grammar {
namespace {

struct Case {
  const char* name;
  const char* gbnf;
  const char* pcre;
  std::vector<std::string> pieces;  // random strings are made of these (whole code points)
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"literal", R"(root ::= "abc")", "abc", {"a", "b", "c", "ab"}},
      {"choice", R"(root ::= "cat" | "car" | "dog")", "cat|car|dog", {"ca", "do", "c", "t", "r", "g", "o"}},
      {"star", R"(root ::= "a" "b"* "c")", "ab*c", {"a", "b", "c"}},
      {"plus_opt", R"(root ::= [0-9]+ ("." [0-9]+)? )", R"([0-9]+(?:\.[0-9]+)?)", {"0", "7", ".", "x"}},
      {"bounded", R"(root ::= [a-c]{2,4} "!")", "[a-c]{2,4}!", {"a", "b", "c", "d", "!"}},
      {"exact", R"(root ::= "x"{3})", "x{3}", {"x", "y"}},
      {"at_least", R"(root ::= "ab"{2,} )", "(?:ab){2,}", {"a", "b", "ab"}},
      {"negated", R"(root ::= "\"" [^"\\]* "\"")", R"("[^"\\]*")", {"\"", "\\", "a", "é", "€", "😀"}},
      {"dot", R"(root ::= "<" . . ">")", "<..>", {"<", ">", "a", "ü", "中", "😀"}},
      {"unicode_range", R"(root ::= [α-ω]+ [\u4E00-\u9FFF]?)", "[α-ω]+[\\x{4E00}-\\x{9FFF}]?",
       {"α", "ω", "β", "a", "中", "Ω", "\xE9\xBF\xBF"}},
      {"astral", R"(root ::= [\U0001F600-\U0001F64F]{1,3})", "[\\x{1F600}-\\x{1F64F}]{1,3}",
       {"😀", "🙏", "🚀", "a"}},
      {"rules", "root ::= num (\",\" num)*\nnum ::= \"-\"? digit+\ndigit ::= [0-9]",
       "-?[0-9]+(?:,-?[0-9]+)*", {"-", "1", "0", ",", " "}},
      {"nullable_rule", "root ::= a b \"z\"\na ::= \"x\"?\nb ::= a a", "x?x?x?z", {"x", "z"}},
      {"escapes", R"(root ::= "\t" [\n\r]+ "\x41")", "\\t[\\n\\r]+A", {"\t", "\n", "\r", "A", "B"}},
      {"class_edges", R"(root ::= [\-\]a]+)", "[\\-\\]a]+", {"-", "]", "a", "b"}},
  };
  return cases;
}

class MatcherRegularTest : public ::testing::TestWithParam<Case> {};

TEST_P(MatcherRegularTest, AgreesWithPcre2OnRandomStrings) {
  const Case& c = GetParam();
  auto g = ParseGbnf(c.gbnf);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto a = Automaton::Compile(*g);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto automaton = std::make_shared<const Automaton>(std::move(*a));
  testing::Pcre2 oracle(c.pcre);
  std::mt19937 rng(1234);
  int matches = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s;
    const int len = static_cast<int>(rng() % 9);
    Matcher m(automaton);
    bool viable = true;
    for (int k = 0; k < len && viable; ++k) {  // up to the first piece that cannot follow
      const std::string& piece = c.pieces[rng() % c.pieces.size()];
      s += piece;
      viable = oracle.Viable(s);
      ASSERT_EQ(m.CanAccept(piece), viable) << c.name << ": '" << s << "'";
      ASSERT_EQ(m.Accept(piece), viable) << c.name << ": '" << s << "'";
    }
    if (!viable) continue;
    const bool full = oracle.FullMatch(s);
    matches += full;
    ASSERT_EQ(m.IsAccepting(), full) << c.name << ": '" << s << "'";
  }
  EXPECT_GT(matches, 5) << c.name << ": the random strings should hit the language";
}

INSTANTIATE_TEST_SUITE_P(Grammars, MatcherRegularTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// Bytes of a code point one at a time: the state between them is viable, a wrong continuation
// byte or a lone continuation byte is not.
TEST(MatcherBytesTest, MultibyteCodePointsAdvanceByteByByte) {
  auto g = ParseGbnf(R"(root ::= [é€😀]+)");
  ASSERT_TRUE(g.ok());
  auto a = Automaton::Compile(*g);
  ASSERT_TRUE(a.ok());
  Matcher m(std::make_shared<const Automaton>(std::move(*a)));
  const std::string euro = "€";
  EXPECT_TRUE(m.Accept(euro.substr(0, 1)));
  EXPECT_FALSE(m.IsAccepting());
  EXPECT_FALSE(m.CanAccept("\x41"));
  EXPECT_TRUE(m.Accept(euro.substr(1)));
  EXPECT_TRUE(m.IsAccepting());
  EXPECT_FALSE(m.CanAccept("\x80"));
  EXPECT_FALSE(m.CanAccept("\xC3\xA8"));  // è, not é
  EXPECT_TRUE(m.Accept("😀é"));
  EXPECT_TRUE(m.IsAccepting());
}

}  // namespace
}  // namespace tandem::grammar
