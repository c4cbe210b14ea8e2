// A JSON grammar (RFC 8259 in GBNF, tests/grammar/json.gbnf) run by the Matcher, against nlohmann::json's
// own parser (nlohmann::json::accept) as the oracle, on valid documents and random edits of them.
// Not regular (nesting), so this exercises the automaton's rule calls and returns.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"

namespace tandem::grammar {
namespace {

using testing::JsonGbnf;

std::shared_ptr<const Automaton> JsonAutomaton() {
  auto g = ParseGbnf(JsonGbnf());
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  auto a = Automaton::Compile(*g);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::make_shared<const Automaton>(std::move(*a));
}

bool GrammarAccepts(const std::shared_ptr<const Automaton>& a, const std::string& s) {
  Matcher m(a);
  return m.Accept(s) && m.IsAccepting();
}

TEST(MatcherJsonTest, ValidDocumentsAreAcceptedWithEveryPrefixViable) {
  auto a = JsonAutomaton();
  const std::vector<std::string> docs = {
      "{}", "[]", "0", "-0.5e+10", "\"\"", "true", " null ",
      R"({"a": [1, 2, {"b": null}], "c": "x\ny\u00e9\"", "d": -12.5E-3})",
      R"([[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]])", "\n\t{ \"k\" :\r\n\"v\" }\n",
      R"({"é": "😀", "nested": {"deep": {"deeper": [true, false, null]}}})"};
  for (const std::string& d : docs) {
    ASSERT_TRUE(nlohmann::json::accept(d)) << d;
    Matcher m(a);
    for (size_t i = 0; i < d.size(); ++i) {
      ASSERT_TRUE(m.Accept(d.substr(i, 1))) << d << " at " << i;
    }
    EXPECT_TRUE(m.IsAccepting()) << d;
  }
}

TEST(MatcherJsonTest, RandomEditsAgreeWithNlohmann) {
  auto a = JsonAutomaton();
  const std::vector<std::string> seeds = {
      R"({"a": [1, 2.5, -3e2], "b": {"c": "d"}, "e": true})", R"([null, false, "x\\y", {}])",
      R"("str")", "12", R"({"k": [[], [{}], [1, {"z": null}]]})"};
  const std::vector<std::string> pieces = {"{", "}", "[", "]", ":", ",", " ", "\"", "a", "1",
                                           "0", "-", ".", "e", "E", "+", "true", "null", "\\",
                                           "\\n", "\n", "\t", "\x01"};
  std::mt19937 rng(7);
  int valid = 0, invalid = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    std::string s = seeds[rng() % seeds.size()];
    const int edits = static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (s.size() + 1);
      if (rng() % 2 && at < s.size()) {
        s.erase(at, 1 + rng() % 3);
      } else {
        s.insert(at, pieces[rng() % pieces.size()]);
      }
    }
    const bool expect = nlohmann::json::accept(s);
    (expect ? valid : invalid)++;
    ASSERT_EQ(GrammarAccepts(a, s), expect) << "'" << s << "'";
  }
  EXPECT_GT(valid, 500);
  EXPECT_GT(invalid, 500);
}

}  // namespace
}  // namespace tandem::grammar
