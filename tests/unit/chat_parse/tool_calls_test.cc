// Tool-call parsers on hand-written outputs in each model family's format (as their chat templates
// and model cards write calls: Qwen3 / Hermes, Qwen3-Coder, Llama 3.1 JSON, Mistral v3 and v11,
// Llama 3.2 pythonic), malformed calls kept as content, and the streaming parser over every split
// of each output (two pieces at every byte offset, byte by byte, random pieces): the accumulated
// stream equals the whole-text parse.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "chat_parse/reasoning.h"
#include "chat_parse/tool_calls.h"

namespace tandem::chat_parse {
namespace {

using ojson = nlohmann::ordered_json;

struct Case {
  ToolCallFormat format;
  std::string text;
  std::string content;
  std::vector<ToolCall> calls;
};

const ojson& Tools() {
  static const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                     "metric": {"type": "boolean"}, "zip": {"type": "string"}}}}}])");
  return tools;
}

const std::vector<Case>& Cases() {
  using F = ToolCallFormat;
  static const std::vector<Case> cases = {
      // Qwen3 / Hermes: one call, as Qwen3-8B writes it after its think block was parsed off.
      {F::kHermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "", {{"get_weather", R"({"city":"Paris"})"}}},
      // Text before, two parallel calls, arguments given as a JSON string.
      {F::kHermes,
       "Let me check both cities.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Köln\\\"}\"}\n</tool_call>",
       "Let me check both cities.",
       {{"get_weather", R"({"city":"Paris","days":3})"}, {"get_weather", R"({"city":"Köln"})"}}},
      // Malformed: bad JSON stays content, as written; a good call after it still parses.
      {F::kHermes, "<tool_call>\n{\"name\": get_weather}\n</tool_call>\n<tool_call>{\"name\":\"x\"}</tool_call>",
       "<tool_call>\n{\"name\": get_weather}\n</tool_call>", {{"x", "{}"}}},
      {F::kHermes, "<tool_call>\n{\"arguments\": {}}\n</tool_call>", "<tool_call>\n{\"arguments\": {}}\n</tool_call>", {}},
      // The end tag inside an argument's string is the argument's text (an enforced call's grammar
      // allows it); escaped quotes do not end the string.
      {F::kHermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"say \\\"</tool_call>\\\" \\\\\"}}\n</tool_call> after",
       "after", {{"a", R"({"s":"say \"</tool_call>\" \\"})"}}},
      // Text on both sides of a call keeps one separator: the whitespace before the call, else the
      // whitespace after it; none when the model wrote none.
      {F::kHermes, "A\n\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n\nB", "A\n\nB", {{"now", "{}"}}},
      {F::kHermes, "A<tool_call>{\"name\": \"now\"}</tool_call> B<tool_call>{\"name\": \"now\"}</tool_call>\n<tool_call>{\"name\": \"now\"}</tool_call>C",
       "A B\nC", {{"now", "{}"}, {"now", "{}"}, {"now", "{}"}}},
      {F::kHermes, "weather<tool_call>{\"name\": \"now\"}</tool_call>and", "weatherand", {{"now", "{}"}}},
      // Cut off by max_tokens inside a call: content.
      {F::kHermes, "Sure <tool_call>\n{\"name\": \"get_wea", "Sure <tool_call>\n{\"name\": \"get_wea", {}},
      {F::kHermes, "No tools needed. 1 < 2 and <tool is not a tag.\n", "No tools needed. 1 < 2 and <tool is not a tag.\n", {}},
      // Qwen3-Coder: parameters typed by the tool's schema.
      {F::kQwen3Coder,
       "I'll look it up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
       "<parameter=days>\n5\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n<parameter=zip>\n10001\n</parameter>\n"
       "</function>\n</tool_call>",
       "I'll look it up.", {{"get_weather", R"({"city":"New York","days":5,"metric":true,"zip":"10001"})"}}},
      {F::kQwen3Coder, "<tool_call>\n<function=lookup>\n<parameter=q>\n{\"a\": [1, 2]}\n</parameter>\n</function>\n</tool_call>",
       "", {{"lookup", R"({"q":{"a":[1,2]}})"}}},
      {F::kQwen3Coder, "<tool_call>\nnot a function\n</tool_call>", "<tool_call>\nnot a function\n</tool_call>", {}},
      // A raw value may hold the end tags (the enforced grammar allows any text but </parameter>).
      {F::kQwen3Coder,
       "<tool_call>\n<function=lookup>\n<parameter=q>\nsee </function> and </tool_call> here\n</parameter>\n</function>\n</tool_call> done",
       "done", {{"lookup", R"({"q":"see </function> and </tool_call> here"})"}}},
      // Llama 3.1 JSON tool calling (its model card's format), with and without <|python_tag|>.
      {F::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco\"}}", "",
       {{"get_weather", R"({"city":"San Francisco"})"}}},
      {F::kLlama3Json, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1.5}}", "",
       {{"a", "{}"}, {"b", R"({"x":1.5})"}}},
      {F::kLlama3Json, "The weather is {sunny}.", "The weather is {sunny}.", {}},
      {F::kLlama3Json, "{\"not\": \"a call\"}", "{\"not\": \"a call\"}", {}},
      // Mistral: v3 (JSON list) and v11 (name[ARGS]{...}).
      {F::kMistral, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}, {\"name\": \"now\", \"arguments\": {}}]", "",
       {{"get_weather", R"({"city":"Lyon"})"}, {"now", "{}"}}},
      {F::kMistral, "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}[TOOL_CALLS]now[ARGS]{}", "Checking.",
       {{"get_weather", R"({"city":"Nice"})"}, {"now", "{}"}}},
      {F::kMistral, "[TOOL_CALLS] oops", "[TOOL_CALLS] oops", {}},
      // Pythonic (Llama 3.2 / Llama 4).
      {F::kPythonic, "[get_weather(city='San Francisco', days=3, metric=True), search(q=\"a \\\"b\\\"\", opts={'k': [1, None]})]", "",
       {{"get_weather", R"({"city":"San Francisco","days":3,"metric":true})"}, {"search", R"({"q":"a \"b\"","opts":{"k":[1,null]}})"}}},
      {F::kPythonic, "<|python_start|>[now()]<|python_end|>", "", {{"now", "{}"}}},
      {F::kPythonic, "[1, 2, 3] are numbers", "[1, 2, 3] are numbers", {}},
      {F::kPythonic, "Plain answer.", "Plain answer.", {}},
      {F::kNone, "<tool_call>\n{\"name\": \"x\"}\n</tool_call>", "<tool_call>\n{\"name\": \"x\"}\n</tool_call>", {}},
  };
  return cases;
}

ToolCallDelta Stream(const Case& c, const std::vector<std::string>& pieces) {
  ToolCallParser p(c.format, &Tools());
  ToolCallDelta all;
  auto add = [&](ToolCallDelta d) {
    all.content += d.content;
    for (ToolCall& call : d.calls) all.calls.push_back(std::move(call));
  };
  for (const std::string& piece : pieces) add(p.Feed(piece));
  add(p.Finish());
  return all;
}

std::string Name(const Case& c) { return std::string(ToolCallFormatName(c.format)) + ": " + c.text; }

TEST(ToolCallParser, WholeText) {
  for (const Case& c : Cases()) {
    ToolCallDelta d = ParseToolCalls(c.format, c.text, &Tools());
    EXPECT_EQ(d.content, c.content) << Name(c);
    EXPECT_EQ(d.calls, c.calls) << Name(c);
    for (const ToolCall& call : d.calls) EXPECT_FALSE(ojson::parse(call.arguments).is_discarded());
  }
}

// Arguments nested past 512 levels (a model may write anything) are not a call: the text stays
// content, and nothing recurses over them (dumping 100 k nested arrays overflowed the stack). 510
// arrays in the arguments (512 levels with the call's and the arguments' objects) still make a
// call, 511 do not.
TEST(ToolCallParser, ArgumentsNestedTooDeeplyStayContent) {
  auto call = [](int depth) {
    return "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": " + std::string(depth, '[') +
           std::string(depth, ']') + "}}\n</tool_call>";
  };
  ToolCallDelta deep = ParseToolCalls(ToolCallFormat::kHermes, call(100000), &Tools());
  EXPECT_TRUE(deep.calls.empty());
  EXPECT_EQ(deep.content, call(100000));
  EXPECT_TRUE(ParseToolCalls(ToolCallFormat::kHermes, call(511), &Tools()).calls.empty());
  ToolCallDelta ok = ParseToolCalls(ToolCallFormat::kHermes, call(510), &Tools());
  ASSERT_EQ(ok.calls.size(), 1u) << ok.content.substr(0, 200);
  EXPECT_EQ(ok.calls[0].name, "get_weather");
}

TEST(ToolCallParser, EverySplitPointAndByteByByte) {
  for (const Case& c : Cases()) {
    for (size_t k = 0; k <= c.text.size(); ++k) {
      ToolCallDelta d = Stream(c, {c.text.substr(0, k), c.text.substr(k)});
      ASSERT_EQ(d.content, c.content) << Name(c) << " split at " << k;
      ASSERT_EQ(d.calls, c.calls) << Name(c) << " split at " << k;
    }
    std::vector<std::string> bytes;
    for (char ch : c.text) bytes.emplace_back(1, ch);
    ToolCallDelta d = Stream(c, bytes);
    EXPECT_EQ(d.content, c.content) << Name(c);
    EXPECT_EQ(d.calls, c.calls) << Name(c);
  }
}

TEST(ToolCallParser, RandomSplits) {
  std::mt19937 rng(2025);
  for (const Case& c : Cases()) {
    for (int round = 0; round < 200; ++round) {
      std::vector<std::string> pieces;
      for (size_t i = 0; i < c.text.size();) {
        size_t n = std::uniform_int_distribution<size_t>(0, 12)(rng);
        pieces.push_back(c.text.substr(i, n));
        i += n;
      }
      ToolCallDelta d = Stream(c, pieces);
      ASSERT_EQ(d.content, c.content) << Name(c);
      ASSERT_EQ(d.calls, c.calls) << Name(c);
    }
  }
}

TEST(ToolCallParser, ACallIsGivenOnceComplete) {
  ToolCallParser p(ToolCallFormat::kHermes, nullptr);
  ToolCallDelta d = p.Feed("Hi <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_");
  EXPECT_EQ(d.content, "Hi");
  EXPECT_TRUE(d.calls.empty());
  d = p.Feed("call>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_EQ(p.num_calls(), 1);
}

TEST(ToolCallParser, Names) {
  for (const char* n : {"hermes", "qwen3_coder", "llama3_json", "mistral", "pythonic", "none"})
    EXPECT_STREQ(ToolCallFormatName(*ParseToolCallFormat(n)), n);
  EXPECT_FALSE(ParseToolCallFormat("json"));
}

}  // namespace
}  // namespace tandem::chat_parse

namespace tandem::chat_parse {
namespace {

TEST(ParsersForTemplate, RecognizeTheFamilies) {
  // Snippets of the families' chat templates (their tool-call instructions and think handling).
  EXPECT_EQ(ToolCallFormatForTemplate("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(ToolCallFormatForTemplate("<tool_call>\n<function=example_function_name>\n<parameter=x>"), ToolCallFormat::kQwen3Coder);
  EXPECT_EQ(ToolCallFormatForTemplate("{{- '[TOOL_CALLS][' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(ToolCallFormatForTemplate("{{- '<|python_tag|>' }}"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(ToolCallFormatForTemplate("{{ messages }}"), ToolCallFormat::kNone);
  EXPECT_EQ(ReasoningFormatForTemplate("{%- if '</think>' in content %}"), ReasoningFormat::kQwen3);
  EXPECT_EQ(ReasoningFormatForTemplate("{{'<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think>\\n'}}"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(ReasoningFormatForTemplate("{{- '<|im_start|>assistant\\n<think>\\n' }}"), ReasoningFormat::kDeepSeekR1);
  EXPECT_EQ(ReasoningFormatForTemplate("{{ messages }}"), ReasoningFormat::kNone);
}

}  // namespace
}  // namespace tandem::chat_parse

namespace tandem::chat_parse {
namespace {

// Random texts made of the formats' own pieces (markers, brackets, quotes, names): every parser
// returns (no crash, arguments always JSON), and any split of the stream gives the whole-text parse.
TEST(ToolCallParser, RandomPiecesNeverBreakAndStreamEqualsWhole) {
  const std::vector<std::string> pieces = {
      "<tool_call>", "</tool_call>", "<tool_", "<function=f>", "</function>", "<parameter=a>", "</parameter>",
      "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "<|python_start|>", "<|python_end|>", "{", "}", "[", "]", "(",
      ")", "\"", "'", "\\", ":", ",", ";", "=", " ", "\n", "name", "\"name\": \"f\"", "\"arguments\": {}",
      "f(a=1)", "x", "é", "True", "None", "1.5"};
  std::mt19937 rng(7);
  const ToolCallFormat formats[] = {ToolCallFormat::kHermes, ToolCallFormat::kQwen3Coder, ToolCallFormat::kLlama3Json,
                                    ToolCallFormat::kMistral, ToolCallFormat::kPythonic};
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int n = std::uniform_int_distribution<int>(1, 14)(rng);
    for (int i = 0; i < n; ++i) text += pieces[std::uniform_int_distribution<size_t>(0, pieces.size() - 1)(rng)];
    for (ToolCallFormat f : formats) {
      const ToolCallDelta whole = ParseToolCalls(f, text, nullptr);
      for (const ToolCall& c : whole.calls) ASSERT_FALSE(ojson::parse(c.arguments, nullptr, false).is_discarded()) << text;
      ToolCallParser p(f, nullptr);
      ToolCallDelta streamed;
      for (size_t i = 0; i < text.size();) {
        const size_t k = std::uniform_int_distribution<size_t>(1, 5)(rng);
        ToolCallDelta d = p.Feed(text.substr(i, k));
        streamed.content += d.content;
        for (auto& c : d.calls) streamed.calls.push_back(c);
        i += k;
      }
      ToolCallDelta d = p.Finish();
      streamed.content += d.content;
      for (auto& c : d.calls) streamed.calls.push_back(c);
      ASSERT_EQ(streamed.content, whole.content) << ToolCallFormatName(f) << ": " << text;
      ASSERT_EQ(streamed.calls, whole.calls) << ToolCallFormatName(f) << ": " << text;
    }
  }
}

}  // namespace
}  // namespace tandem::chat_parse
