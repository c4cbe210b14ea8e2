// The forced-tool-call grammar: it compiles, accepts the hermes calls the parser reads back, and
// refuses other names, arguments off the schema, and text outside the calls.
#include <gtest/gtest.h>

#include "chat_parse/tool_calls.h"
#include "chat_parse/tool_grammar.h"
#include "grammar/matcher.h"
#include "grammar/structured_output.h"

namespace tandem::chat_parse {
namespace {

using ojson = nlohmann::ordered_json;

std::vector<ojson> Functions() {
  return {ojson::parse(R"({"name": "get_weather", "parameters": {"type": "object",
            "properties": {"city": {"type": "string"}}, "required": ["city"],
            "additionalProperties": false}})"),
          ojson::parse(R"({"name": "now"})")};
}

bool Accepts(const std::string& gbnf, const std::string& text) {
  auto automaton = grammar::CompileStructuredOutput({grammar::StructuredKind::kGrammar, gbnf});
  EXPECT_TRUE(automaton.ok()) << automaton.status().message() << "\n" << gbnf;
  if (!automaton.ok()) return false;
  grammar::Matcher m(*automaton);
  return m.Accept(text) && m.IsAccepting();
}

TEST(ToolCallGrammar, AcceptsExactlyHermesCalls) {
  auto gbnf = ToolCallGbnf(Functions(), {});
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>";
  EXPECT_TRUE(Accepts(*gbnf, call));
  EXPECT_TRUE(Accepts(*gbnf, "<think>\n\n</think>\n\n" + call));
  EXPECT_TRUE(Accepts(*gbnf, call + "\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*gbnf, "Hello " + call));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  ToolCallDelta d = ParseToolCalls(ToolCallFormat::kHermes, call, nullptr);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, R"({"city":"Paris"})");
}

TEST(ToolCallGrammar, OneCallWithoutThink) {
  auto gbnf = ToolCallGbnf({Functions()[1]}, {.allow_think = false, .parallel = false});
  ASSERT_TRUE(gbnf.ok());
  const std::string call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(Accepts(*gbnf, call));
  EXPECT_FALSE(Accepts(*gbnf, call + "\n" + call));
  EXPECT_FALSE(Accepts(*gbnf, "<think></think>" + call));
}

TEST(ToolCallGrammar, UnsupportedSchemaIsAnError) {
  auto gbnf = ToolCallGbnf({ojson::parse(R"({"name": "f", "parameters": {"type": "object",
      "patternProperties": {"x": {}}}})")}, {});
  ASSERT_FALSE(gbnf.ok());
  EXPECT_NE(gbnf.status().message().find("function 'f'"), std::string::npos) << gbnf.status().message();
}

}  // namespace
}  // namespace tandem::chat_parse

namespace tandem::chat_parse {
namespace {

TEST(ToolCallGrammar, ThinkBodyIsAnyTextWithoutTheEndTag) {
  auto gbnf = ToolCallGbnf({ojson::parse(R"({"name": "now"})")}, {});
  ASSERT_TRUE(gbnf.ok());
  const std::string call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(Accepts(*gbnf, "<think>\nif a < b and <tag> or </thin or <</think>\n\n" + call));
  EXPECT_TRUE(Accepts(*gbnf, "<think>\n<<</think>" + call));
  EXPECT_FALSE(Accepts(*gbnf, "<think>\na</think>b</think>" + call));
}

TEST(ToolCallGrammar, AutoAllowsTextThenOptionalCalls) {
  ToolCallGrammarOptions options;
  options.allow_text = true;
  auto gbnf = ToolCallGbnf(Functions(), options);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>";
  EXPECT_TRUE(Accepts(*gbnf, "Just an answer, 1 < 2, <tool or <tool_cal."));
  EXPECT_TRUE(Accepts(*gbnf, ""));
  EXPECT_TRUE(Accepts(*gbnf, "<think>\nhm\n</think>\n\nLet me look.\n" + call));
  EXPECT_TRUE(Accepts(*gbnf, "<tool_cal" + call));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(*gbnf, call + " and text after"));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>not json</tool_call>"));
}

}  // namespace
}  // namespace tandem::chat_parse

namespace tandem::chat_parse {
namespace {

TEST(ToolCallGrammar, Llama3JsonForcedCalls) {
  ToolCallGrammarOptions options;
  options.format = ForcedCallFormat(ToolCallFormat::kLlama3Json);
  options.allow_think = false;
  auto gbnf = ToolCallGbnf(Functions(), options);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  const std::string call = "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Paris\"}}";
  EXPECT_TRUE(Accepts(*gbnf, call));
  EXPECT_TRUE(Accepts(*gbnf, call + "; {\"name\": \"now\", \"parameters\": {}}"));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n" + call));
  ToolCallDelta d = ParseToolCalls(ToolCallFormat::kLlama3Json, call + "; {\"name\": \"now\", \"parameters\": {}}", nullptr);
  ASSERT_EQ(d.calls.size(), 2u);
  EXPECT_EQ(d.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(ForcedCallFormat(ToolCallFormat::kPythonic), ToolCallFormat::kHermes);
  options.format = ToolCallFormat::kPythonic;
  EXPECT_FALSE(ToolCallGbnf(Functions(), options).ok());
}

}  // namespace
}  // namespace tandem::chat_parse

namespace tandem::chat_parse {
namespace {

TEST(ToolCallGrammar, Qwen3CoderForcedCallsParseBackTyped) {
  const std::vector<ojson> fns = {ojson::parse(R"({"name": "book", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "minLength": 2, "maxLength": 8}, "nights": {"type": "integer", "minimum": 1, "maximum": 9},
                     "kind": {"type": "string", "enum": ["hotel", "flat"]}, "extras": {"type": "array", "items": {"type": "string"}}},
      "required": ["city", "nights"]}})")};
  ToolCallGrammarOptions options;
  options.format = ForcedCallFormat(ToolCallFormat::kQwen3Coder);
  auto gbnf = ToolCallGbnf(fns, options);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  const std::string call = "<tool_call>\n<function=book>\n<parameter=city>\nNew York\n</parameter>\n"
                           "<parameter=nights>\n3\n</parameter>\n<parameter=kind>\nflat\n</parameter>\n"
                           "</function>\n</tool_call>";
  EXPECT_TRUE(Accepts(*gbnf, "<think>\n\n</think>\n\n" + call));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n<function=book>\n<parameter=city>\nXY\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n<function=book>\n<parameter=city>\nX\n</parameter>\n"
                              "<parameter=nights>\n3\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n<function=book>\n<parameter=city>\nX\n</parameter>\n"
                              "<parameter=nights>\n12\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_TRUE(Accepts(*gbnf, "<tool_call>\n<function=book>\n<parameter=city>\nXY\n</parameter>\n"
                             "<parameter=nights>\n9\n</parameter>\n</function>\n</tool_call>"));
  const ojson tools = ojson::array({{{"type", "function"}, {"function", fns[0]}}});
  ToolCallDelta d = ParseToolCalls(ToolCallFormat::kQwen3Coder, call, &tools);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, R"({"city":"New York","nights":3,"kind":"flat"})");
  auto bad = ToolCallGbnf({ojson::parse(R"({"name": "f", "parameters": {"type": "object",
      "properties": {"s": {"type": "string", "pattern": "a+"}}}})")}, options);
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace tandem::chat_parse

namespace tandem::chat_parse {
namespace {

// A server with --tool-call-parser mistral forces calls in Mistral's own form, and its parser reads
// every call the grammar lets through back as the same name and arguments.
TEST(ToolCallGrammar, MistralForcedCallsParseBack) {
  ToolCallGrammarOptions options;
  options.format = ForcedCallFormat(ToolCallFormat::kMistral);
  ASSERT_EQ(options.format, ToolCallFormat::kMistral);
  options.allow_think = false;
  auto gbnf = ToolCallGbnf(Functions(), options);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().message();
  const std::string one = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}]";
  const std::string two = "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}, "
                          "{\"name\": \"now\", \"arguments\": {}}]";
  EXPECT_TRUE(Accepts(*gbnf, one));
  EXPECT_TRUE(Accepts(*gbnf, two));
  EXPECT_FALSE(Accepts(*gbnf, "[TOOL_CALLS][]"));
  EXPECT_FALSE(Accepts(*gbnf, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {}}]"));
  EXPECT_FALSE(Accepts(*gbnf, "Sure. " + one));
  EXPECT_FALSE(Accepts(*gbnf, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  ToolCallDelta d = ParseToolCalls(ToolCallFormat::kMistral, two, nullptr);
  ASSERT_EQ(d.calls.size(), 2u);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(d.calls[1].name, "now");
  EXPECT_EQ(d.content, "");

  options.parallel = false;
  auto single = ToolCallGbnf(Functions(), options);
  ASSERT_TRUE(single.ok());
  EXPECT_TRUE(Accepts(*single, one));
  EXPECT_FALSE(Accepts(*single, two));

  options.parallel = true;
  options.allow_text = true;  // tool_choice auto with a strict function
  auto text = ToolCallGbnf(Functions(), options);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_TRUE(Accepts(*text, "No call needed, [TOOL or [TOOL_CALL] is fine."));
  EXPECT_TRUE(Accepts(*text, "Checking. " + two));
  EXPECT_FALSE(Accepts(*text, "[TOOL_CALLS][{\"name\": \"other\", \"arguments\": {}}]"));
}

}  // namespace
}  // namespace tandem::chat_parse
