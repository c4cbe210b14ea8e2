// GBNF reading (grammar.h) and compiling (automaton.h): errors name the place and the rule;
// ToGbnf reads back to the same language (checked on random strings); UTF-8 range sequences agree
// with PCRE2's reading of the same class.
#include <algorithm>
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

std::string ErrorOf(const char* gbnf) {
  auto g = ParseGbnf(gbnf);
  if (!g.ok()) return g.status().ToString();
  auto a = Automaton::Compile(*g);
  return a.ok() ? "" : a.status().ToString();
}

TEST(GbnfTest, SyntaxErrorsSayWhere) {
  EXPECT_NE(ErrorOf("root ::= \"abc").find("line 1"), std::string::npos) << ErrorOf("root ::= \"abc");
  EXPECT_NE(ErrorOf("root ::= a\n\nb ::= [x").find("line 3"), std::string::npos);
  EXPECT_NE(ErrorOf("root = \"x\"").find("'::='"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= (\"a\"").find("')'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"{3,1}").find("n < m"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= [z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= x").find("'x' is used but not defined"), std::string::npos);
  EXPECT_NE(ErrorOf("start ::= \"x\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  std::string deep = "root ::= " + std::string(1000, '(') + "\"x\"" + std::string(1000, ')');
  EXPECT_NE(ErrorOf(deep.c_str()).find("nested too deeply"), std::string::npos);
}

TEST(GbnfTest, LeftRecursionAndSizeAreRefused) {
  EXPECT_NE(ErrorOf("root ::= root \"a\" | \"b\"").find("'root' is left-recursive"), std::string::npos);
  EXPECT_NE(ErrorOf("root ::= x \"a\"\nx ::= y\ny ::= \"\"? root").find("left-recursive"), std::string::npos);
  EXPECT_EQ(ErrorOf("root ::= \"a\" root | \"b\""), "");  // right recursion is fine
  auto g = ParseGbnf("root ::= ([a-z]{100}){100}");
  ASSERT_TRUE(g.ok());
  auto a = Automaton::Compile(*g, 5000);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("too large"), std::string::npos);
}

// Thousands of rules (a hostile spec within the 1 MB limit): a rule whose nullability is known only
// through a chain of 3000 rules (r0 ::= r1 r1, ..., the last "" or "a" r0), declared in both orders.
// z calls r0 and then itself before any byte, so it is left-recursive only because r0 can be empty,
// which the worklist must carry down the whole chain; with a byte between the two calls it is fine.
// And a left recursion around a cycle of 60 k rules is found and named without deep recursion.
TEST(GbnfTest, ManyRulesNullableChainsAndLongLeftRecursiveCycles) {
  auto chain = [](int n, bool reversed, const std::string& z) {
    std::vector<std::string> rules;
    for (int i = 0; i < n; ++i) {
      const std::string next = "r" + std::to_string(i + 1);
      rules.push_back("r" + std::to_string(i) + " ::= " + (i + 1 < n ? next + " " + next : "\"\" | \"a\" r0"));
    }
    if (reversed) std::reverse(rules.begin(), rules.end());
    std::string text = "root ::= z\nz ::= " + z + "\n";
    for (const std::string& r : rules) text += r + "\n";
    return text;
  };
  for (bool reversed : {false, true}) {
    SCOPED_TRACE(reversed ? "reversed" : "in order");
    EXPECT_NE(ErrorOf(chain(3000, reversed, "r0 z \"q\" | \"b\"").c_str()).find("left-recursive"), std::string::npos);
    EXPECT_EQ(ErrorOf(chain(3000, reversed, "r0 \"q\" z | \"b\"").c_str()), "");
  }
  std::string cycle = "root ::= r0\n";
  constexpr int kRules = 60000;
  for (int i = 0; i < kRules; ++i) {
    cycle += "r" + std::to_string(i) + " ::= r" + std::to_string((i + 1) % kRules) + " \"a\" | \"b\"\n";
  }
  EXPECT_NE(ErrorOf(cycle.c_str()).find("is left-recursive"), std::string::npos);
}

// Compile checks a node count computed from the grammar before it builds anything (a huge
// grammar is refused in time linear in its text); the count must equal the nodes it then builds,
// through inlined rules, called (recursive) ones, empty alternatives and every kind of repeat.
TEST(GbnfTest, TheNodeCountBeforeBuildingIsExact) {
  for (const char* gbnf : {
           "root ::= \"a\"",
           "root ::= \"\" | \"abc\" \"\" [x-z]",
           "root ::= item (\",\" item)*\nitem ::= [a-z]+ | \"(\" root \")\"",
           "root ::= x{2,5} x{3} x{0,2} x{2,} x? x*\nx ::= \"ab\" | [^\\n]",
           "root ::= [\\u0080-\\U0010FFFF]{1,3} ([a-c] | \"\"){4}",
           "root ::= a b\na ::= b b\nb ::= \"xy\" c\nc ::= [0-9]{0,3}",
           "root ::= \"a\" root | \"b\"",
       }) {
    auto g = ParseGbnf(gbnf);
    ASSERT_TRUE(g.ok()) << gbnf << ": " << g.status().ToString();
    auto a = Automaton::Compile(*g);
    ASSERT_TRUE(a.ok()) << gbnf << ": " << a.status().ToString();
    auto want = Automaton::CountRaw(*g);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(a->raw_size().nodes, want->nodes) << gbnf;
    EXPECT_EQ(a->raw_size().byte_edges, want->byte_edges) << gbnf;
    EXPECT_GE(a->raw_size().nodes, a->num_nodes()) << gbnf;
  }
}

// Nested unbounded repeats ("x++++...", from the grammar fuzzer) build one copy of x per level:
// with x+ built as x then x*, each '+' doubled the automaton (130 of them: over a minute under
// ASan). The languages: one or more, at least n, zero or more.
TEST(GbnfTest, NestedUnboundedRepeatsStaySmall) {
  auto accepts = [](const std::string& gbnf, const std::string& text) {
    auto g = ParseGbnf(gbnf);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    auto a = Automaton::Compile(*g, 100000);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    if (!g.ok() || !a.ok()) return false;
    Matcher m(std::make_shared<const Automaton>(std::move(*a)));
    return m.Accept(text) && m.IsAccepting();
  };
  const std::string plus = "root ::= [ab]" + std::string(130, '+');
  EXPECT_TRUE(accepts(plus, "a"));
  EXPECT_TRUE(accepts(plus, "abba"));
  EXPECT_FALSE(accepts(plus, ""));
  EXPECT_FALSE(accepts(plus, "abc"));
  const std::string star = "root ::= (\"x\"" + std::string(60, '+') + ")*";
  EXPECT_TRUE(accepts(star, ""));
  EXPECT_TRUE(accepts(star, "xxx"));
  EXPECT_FALSE(accepts("root ::= \"ab\"{2,}", "ab"));
  EXPECT_TRUE(accepts("root ::= \"ab\"{2,}", "abab"));
  EXPECT_TRUE(accepts("root ::= \"ab\"{2,}", "ababab"));
  EXPECT_FALSE(accepts("root ::= (\"ab\"+)+ \"c\"", "c"));
  EXPECT_TRUE(accepts("root ::= (\"ab\"+)+ \"c\"", "ababc"));
}

// A branch that can never end is cut off: only the finite alternative remains, and the root
// alone never ending is an error.
TEST(GbnfTest, BranchesThatCanNeverEndAreDropped) {
  auto g = ParseGbnf("root ::= \"a\" x | \"b\"\nx ::= \"c\" x");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto a = Automaton::Compile(*g);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Matcher m(std::make_shared<const Automaton>(std::move(*a)));
  EXPECT_FALSE(m.CanAccept("a"));
  EXPECT_TRUE(m.Accept("b"));
  EXPECT_TRUE(m.IsAccepting());
  EXPECT_NE(ErrorOf("root ::= \"c\" root").find("can never end"), std::string::npos);
}

TEST(GbnfTest, CommentsContinuationsAndGroupsAcrossLines) {
  auto g = ParseGbnf("# a comment\nroot ::= \"a\" |  # first\n  \"b\" (\n \"c\"\n | \"d\" )\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto a = Automaton::Compile(*g);
  ASSERT_TRUE(a.ok());
  auto automaton = std::make_shared<const Automaton>(std::move(*a));
  for (auto [s, ok] : {std::pair{"a", true}, {"bc", true}, {"bd", true}, {"b", false}, {"ac", false}}) {
    Matcher m(automaton);
    EXPECT_EQ(m.Accept(s) && m.IsAccepting(), ok) << s;
  }
}

TEST(GbnfTest, ToGbnfReadsBackToTheSameLanguage) {
  const char* text = "root ::= item (\",\" item){0,3} [^a-c\\]]?\nitem ::= \"\\\"q\\\"\" | [0-9α]+ | \"\"";
  auto g1 = ParseGbnf(text);
  ASSERT_TRUE(g1.ok()) << g1.status().ToString();
  auto g2 = ParseGbnf(g1->ToGbnf());
  ASSERT_TRUE(g2.ok()) << g2.status().ToString() << "\n" << g1->ToGbnf();
  auto a1 = Automaton::Compile(*g1), a2 = Automaton::Compile(*g2);
  ASSERT_TRUE(a1.ok() && a2.ok());
  auto p1 = std::make_shared<const Automaton>(std::move(*a1));
  auto p2 = std::make_shared<const Automaton>(std::move(*a2));
  const std::vector<std::string> pieces = {"\"q\"", "1", "α", ",", "]", "d", "a", "\""};
  std::mt19937 rng(3);
  for (int t = 0; t < 2000; ++t) {
    std::string s;
    for (int k = static_cast<int>(rng() % 8); k > 0; --k) s += pieces[rng() % pieces.size()];
    Matcher m1(p1), m2(p2);
    const bool r1 = m1.Accept(s) && m1.IsAccepting();
    const bool r2 = m2.Accept(s) && m2.IsAccepting();
    ASSERT_EQ(r1, r2) << s;
  }
}

// Every code point of a random range is in exactly one of its sequences, and a code point is in
// one exactly when PCRE2's class [\x{lo}-\x{hi}] matches it.
TEST(Utf8SequencesTest, AgreeWithPcre2Classes) {
  std::mt19937 rng(11);
  const uint32_t edges[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF};
  for (int t = 0; t < 60; ++t) {
    uint32_t lo = t < 20 ? edges[rng() % 10] : rng() % 0x110000;
    uint32_t hi = t < 20 ? edges[rng() % 10] : rng() % 0x110000;
    if (lo > hi) std::swap(lo, hi);
    const auto seqs = Utf8Sequences(lo, hi);
    char pattern[64];
    std::snprintf(pattern, sizeof(pattern), "[\\x{%X}-\\x{%X}]", lo, hi);
    if ((lo >= 0xD800 && lo <= 0xDFFF) || (hi >= 0xD800 && hi <= 0xDFFF)) continue;  // PCRE2 refuses
    testing::Pcre2 oracle(pattern);
    for (int k = 0; k < 300; ++k) {
      uint32_t cp = k < 150 ? lo + rng() % (hi - lo + 1) : rng() % 0x110000;
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string enc;
      AppendUtf8(cp, enc);
      int hits = 0;
      for (const auto& seq : seqs) {
        bool in = seq.size() == enc.size();
        for (size_t i = 0; in && i < enc.size(); ++i) {
          const auto b = static_cast<uint8_t>(enc[i]);
          in = seq[i].first <= b && b <= seq[i].second;
        }
        hits += in;
      }
      ASSERT_LE(hits, 1) << std::hex << cp;
      ASSERT_EQ(hits == 1, oracle.FullMatch(enc)) << pattern << " " << std::hex << cp;
    }
  }
}

}  // namespace
}  // namespace tandem::grammar
