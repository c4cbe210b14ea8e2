// Structured outputs across a disaggregated pair (issue 24): the prefill worker samples the first
// token under the request's grammar and the decode worker goes on from it. Every prompt is
// prefilled remotely (--max-local-prefill-tokens 0); at temperature 1 with several seeds a
// guided_regex output fully matches, a guided_json one parses within its schema and a
// guided_choice one is one of the choices, each with one KV transfer; every block is freed.
// (A decode worker that restarted the grammar after the remote first token would emit a second
// "first" part: the regex would not match.)
#include <regex>

#include "disagg_fixture.h"

namespace tandem::disagg_it {
namespace {

TEST_F(DisaggTest, StructuredOutputsKeepTheirGrammarAcrossTheRemotePrefill) {
  StartWorkers(/*with_prefill=*/true, /*max_local_prefill_tokens=*/0);
  const std::regex plate("[A-Z]{2}-[0-9]{3}");
  for (int seed = 1; seed <= 4; ++seed) {
    SCOPED_TRACE(seed);
    json body = CompletionBody("Licence plate:", 30);
    body["temperature"] = 1.0;
    body["seed"] = seed;
    body["guided_regex"] = "[A-Z]{2}-\\d{3}";
    const double before = Decode().transfers;
    HttpResult r = Post(base_ + PathOf(body), body);
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string text = ResponseText(r.body);
    EXPECT_TRUE(std::regex_match(text, plate)) << text;
    EXPECT_EQ(Decode().transfers, before + 1);

    body.erase("guided_regex");
    body["max_tokens"] = 60;
    body["guided_json"] = {{"type", "array"},
                           {"items", {{"type", "integer"}, {"minimum", 0}, {"maximum", 99}}},
                           {"minItems", 1},
                           {"maxItems", 4}};
    r = Post(base_ + PathOf(body), body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json v = json::parse(ResponseText(r.body), nullptr, false);
    ASSERT_TRUE(v.is_array()) << ResponseText(r.body);
    EXPECT_GE(v.size(), 1u);
    EXPECT_LE(v.size(), 4u);
    for (const json& x : v) EXPECT_TRUE(x.is_number_integer() && x >= 0 && x <= 99) << x;

    body.erase("guided_json");
    body["guided_choice"] = {"north", "south", "east west"};
    r = Post(base_ + PathOf(body), body);
    ASSERT_EQ(r.status, 200) << r.body;
    const std::string choice = ResponseText(r.body);
    EXPECT_TRUE(choice == "north" || choice == "south" || choice == "east west") << choice;
  }
  EXPECT_TRUE(BlocksFreed(/*prefill_too=*/true));
}

}  // namespace
}  // namespace tandem::disagg_it
