// Matcher (matcher.h) on regular grammars against PCRE2 (pcre2_oracle.h): for random strings over
// each case's pieces, the grammar matches the whole string exactly when PCRE2 does, and a string
// can still be extended exactly when PCRE2 reports a (partial) match. The PCRE2 patterns are
// the cases' oracles: another engine's reading of the same language.
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
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

// A state of hundreds of stacks, each byte crossing thousands of edges (corpus
// regress-dot-star-branches: a 2 KB regex of 153 branches of `.` runs and `.*`, walked over its
// own 2 KB; a libFuzzer timeout on the loaded machine, 1.1-1.4 s under ASan unloaded, 0.8-0.9 s
// once Step kept each frame's successors instead of interning them again and Accept stopped
// allocating its states). The cost is the NFA simulation's (stacks x bytes), not exponential; the
// walk agrees with PCRE2 along the way and stays within a generous bound (the old code passes
// this too: the change is a constant factor).
TEST(MatcherLargeStateTest, ManyDotStarBranchesAgreeWithPcre2) {
  std::string pattern;
  for (int i = 0; i < 150; ++i) {
    if (i) pattern += "|";
    pattern += std::string(static_cast<size_t>(i % 7), '.') + (i % 2 ? ".*" : "") +
               std::string(static_cast<size_t>(3 + i % 13), '.') + (i % 3 ? "x" : "3=");
  }
  auto g = RegexToGrammar(pattern);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto a = Automaton::Compile(*g);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  testing::Pcre2 oracle(pattern);
  Matcher m(std::make_shared<const Automaton>(std::move(*a)));
  std::mt19937 rng(7);
  const char kBytes[] = {'x', '3', '=', '.', 'a', '|', '*', 'z'};
  std::string s;
  size_t most_tops = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < 2000; ++k) {
    const std::string byte(1, kBytes[rng() % sizeof(kBytes)]);
    s += byte;
    ASSERT_TRUE(m.Accept(byte)) << k;  // the `.*` branches take anything
    most_tops = std::max(most_tops, m.state().tops.size());
    if (k % 97 == 0 || k > 1990) ASSERT_EQ(m.IsAccepting(), oracle.FullMatch(s)) << k;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(most_tops, 300u);  // the large state this is about
  EXPECT_LT(seconds, 30.0);
  // Multi-byte Accept and CanAccept from that state agree with byte-at-a-time steps.
  Matcher one(m), many(m);
  EXPECT_TRUE(many.CanAccept("x3=ax"));
  EXPECT_EQ(many.state(), m.state());
  ASSERT_TRUE(many.Accept("x3=ax"));
  for (char c : std::string("x3=ax")) ASSERT_TRUE(one.Accept(std::string(1, c)));
  EXPECT_EQ(one.state(), many.state());  // copies of one matcher number their frames alike
}

}  // namespace
}  // namespace tandem::grammar
