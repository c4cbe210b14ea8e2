// Reasoning and tool calls through the chat endpoint, on the bundled model's real tokenizer and
// Qwen3 chat template (so the default parsers are qwen3 and hermes) with a scripted engine:
// message fields, finish_reason, usage, the stream's deltas accumulated as the openai clients do
// (equal to the non-streamed message), the enforced grammar reaching the engine, and bad tool
// parameters as 400s that leave the service serving.
#include <algorithm>
#include <string>

#include "openai_test_util.h"

namespace tandem::testing {
namespace {

const char* kTools = R"([{"type":"function","function":{"name":"get_weather","description":"Weather",
  "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])";

std::string Body(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"Weather in Paris?"}],"max_tokens":90,)" + extra + "}";
}

class ChatToolsTest : public OpenAITest {
 protected:
  void SetUp() override { Make({}, 1024); }
  void Script(const std::string& text) { engine->script.tokens = tokenizer_->Encode(text); }

  // A server whose tool-call parser is `parser`, the engine writing `output` for a tool_choice
  // "required" request: the call comes back as get_weather(city=Paris); returns the grammar the
  // request was constrained with.
  std::string ForcedCallGrammar(chat_parse::ToolCallFormat parser, const std::string& output) {
    OpenAIServiceOptions options;
    options.tool_call_parser = parser;
    Make(options, 1024);
    Script(output);
    json j = NonStream(Body(std::string("\"tools\":") + kTools + R"(,"tool_choice":"required")"));
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
    return engine->submitted().back().params.structured.spec;
  }

  json NonStream(const std::string& body) {
    auto w = Post("/v1/chat/completions", body);
    EXPECT_EQ(w->status, 200) << w->body;
    return json::parse(w->body);
  }

  // The stream's deltas accumulated as the openai npm client's ChatCompletionStream does.
  json Stream(const std::string& body, std::string* finish) {
    auto w = Post("/v1/chat/completions", body);
    EXPECT_EQ(w->status, 200) << w->body;
    json msg = {{"role", "assistant"}};
    std::string content, reasoning;
    bool has_reasoning = false;
    json calls = json::array();
    for (const json& e : SseEvents(w->body)) {
      if (e["choices"].empty()) continue;
      const json& ch = e["choices"][0];
      const json& d = ch["delta"];
      if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) {
        has_reasoning = true;
        reasoning += d["reasoning_content"].get<std::string>();
      }
      if (d.contains("tool_calls")) {
        for (const json& tc : d["tool_calls"]) {
          size_t i = tc["index"].get<size_t>();
          if (i >= calls.size()) {
            EXPECT_EQ(i, calls.size());
            EXPECT_TRUE(tc.contains("id") && tc.contains("type") && tc["function"].contains("name"))
                << "the first delta of a call names it: " << tc.dump();
            calls.push_back({{"id", tc["id"]}, {"type", tc["type"]},
                             {"function", {{"name", tc["function"]["name"]}, {"arguments", ""}}}});
          }
          calls[i]["function"]["arguments"] =
              calls[i]["function"]["arguments"].get<std::string>() + tc["function"]["arguments"].get<std::string>();
        }
      }
      if (!ch["finish_reason"].is_null()) *finish = ch["finish_reason"];
    }
    msg["content"] = content.empty() && !calls.empty() ? json(nullptr) : json(content);
    msg["reasoning_content"] = has_reasoning ? json(reasoning) : json(nullptr);
    if (!calls.empty()) msg["tool_calls"] = calls;
    return msg;
  }

  static std::vector<json> SseEvents(const std::string& body) {
    std::vector<json> events;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
      size_t end = body.find("\n\n", pos);
      std::string data = body.substr(pos + 6, end - pos - 6);
      if (data != "[DONE]") events.push_back(json::parse(data));
      pos = end;
    }
    return events;
  }

  // Tokens of the scripted output strictly between the <think> and </think> tokens.
  int TokensBetweenThinkTags() const {
    const auto& t = engine->script.tokens;
    const auto open = std::find(t.begin(), t.end(), tokenizer_->Encode("<think>").at(0));
    const auto close = std::find(t.begin(), t.end(), tokenizer_->Encode("</think>").at(0));
    return open != t.end() && close != t.end() ? static_cast<int>(close - open - 1) : -1;
  }

  static json WithoutIds(json m) {
    if (m.contains("tool_calls"))
      for (json& c : m["tool_calls"]) c.erase("id");
    return m;
  }
};

TEST_F(ChatToolsTest, ThinkBlockGoesToReasoningContent) {
  Script("<think>\nThe user wants weather.\n</think>\n\nIt is sunny.");
  json j = NonStream(Body("\"stream\":false"));
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "The user wants weather.");
  EXPECT_EQ(m["content"], "It is sunny.");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], TokensBetweenThinkTags());
  std::string finish;
  json s = Stream(Body("\"stream\":true"), &finish);
  EXPECT_EQ(s, m);
  EXPECT_EQ(finish, "stop");
}

TEST_F(ChatToolsTest, EmptyThinkBlockOfTheTinyModel) {
  Script("<think>\n\n</think>\n\nIn recent months");
  json j = NonStream(Body("\"stream\":false"));
  const json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["reasoning_content"].is_null());
  EXPECT_EQ(m["content"], "In recent months");
  // The tags are not reasoning tokens; the "\n\n" between them is (one token).
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], TokensBetweenThinkTags());
  EXPECT_EQ(TokensBetweenThinkTags(), 1);
}

TEST_F(ChatToolsTest, HermesCallsAreToolCalls) {
  Script("<think>\n\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n</tool_call>");
  const std::string extra = std::string("\"tools\":") + kTools;
  json j = NonStream(Body(extra));
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(m["content"], "Checking.");
  ASSERT_EQ(m["tool_calls"].size(), 2u);
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m["tool_calls"][1]["function"]["arguments"].get<std::string>()), json({{"city", "Lyon"}}));
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  std::string finish;
  json s = Stream(Body(extra + ",\"stream\":true"), &finish);
  EXPECT_EQ(WithoutIds(s), WithoutIds(m));
  EXPECT_EQ(finish, "tool_calls");
  // parallel_tool_calls false keeps the first; tool_choice none parses nothing.
  json one = NonStream(Body(extra + ",\"parallel_tool_calls\":false"))["choices"][0]["message"];
  EXPECT_EQ(one["tool_calls"].size(), 1u);
  json none = NonStream(Body(extra + ",\"tool_choice\":\"none\""));
  EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
  EXPECT_EQ(none["choices"][0]["finish_reason"], "stop");
  EXPECT_NE(none["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"), std::string::npos);
}

TEST_F(ChatToolsTest, MalformedCallIsContent) {
  Script("<tool_call>\n{\"name\": oops}\n</tool_call>");
  json j = NonStream(Body(std::string("\"tools\":") + kTools));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "<tool_call>\n{\"name\": oops}\n</tool_call>");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST_F(ChatToolsTest, RequiredAndNamedChoicesSendAGrammar) {
  Script("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>");
  for (const char* choice : {R"("required")", R"({"type":"function","function":{"name":"get_weather"}})"}) {
    json j = NonStream(Body(std::string("\"tools\":") + kTools + ",\"tool_choice\":" + choice));
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
    // A copy: submitted() returns one (a reference into it dangles; ASan found it).
    const grammar::StructuredOutputSpec spec = engine->submitted().back().params.structured;
    EXPECT_EQ(spec.kind, grammar::StructuredKind::kGrammar);
    EXPECT_NE(spec.spec.find("get_weather"), std::string::npos);
  }
}

TEST_F(ChatToolsTest, BadToolParametersAre400AndTheServiceKeepsServing) {
  std::string many = "[";
  for (int i = 0; i < 10000; ++i)
    many += (i ? "," : "") + std::string(R"({"type":"function","function":{"name":"f)") + std::to_string(i) + "\"}}";
  many += "]";
  const std::pair<std::string, const char*> cases[] = {
      {R"("tools":"get_weather")", "tools"},
      {R"("tools":[{"type":"function","function":{"description":"no name"}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"a b"}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":"a string"}}])", "tools[0].function.parameters"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":7}}}])", "tools[0].function.parameters.type"},
      {R"("tools":[{"type":"retrieval"}])", "tools[0].type"},
      {R"("tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])", "tools[1].function.name"},
      {std::string("\"tools\":") + kTools + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})", "tool_choice"},
      {std::string("\"tools\":") + kTools + R"(,"tool_choice":{"type":"function"})", "tool_choice"},
      {std::string("\"tools\":") + kTools + R"(,"tool_choice":"required","guided_regex":"a")", "tool_choice"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","patternProperties":{"x":{}}}}}],"tool_choice":"required")", "tools"},
      {std::string("\"tools\":") + kTools + R"(,"parallel_tool_calls":"yes")", "parallel_tool_calls"},
      {"\"tools\":" + many, "tools"},
      {R"("tool_choice":"required")", "tool_choice"},
      // Not a schema, whatever the tool_choice (auto here): JSON Schema 2020-12's own structure.
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"bogus"}}}])", "tools[0].function.parameters.type"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":7}}}])", "tools[0].function.parameters.properties"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"a":5}}}}])", "tools[0].function.parameters.properties.a"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{"a":{"type":["string","nope"]}}}}}])", "tools[0].function.parameters.properties.a.type"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"anyOf":[]}}}])", "tools[0].function.parameters.anyOf"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"required":"a"}}}])", "tools[0].function.parameters.required"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":{"items":5}}}])", "tools[0].function.parameters.items"},
  };
  for (const auto& [extra, param] : cases) {
    auto w = Post("/v1/chat/completions", Body(extra));
    EXPECT_EQ(w->status, 400) << extra.substr(0, 200);
    json e = json::parse(w->body);
    EXPECT_EQ(e["error"]["param"], param) << w->body.substr(0, 300);
    EXPECT_FALSE(e["error"]["message"].get<std::string>().empty());
  }
  Script("ok");
  EXPECT_EQ(NonStream(Body(std::string("\"tools\":") + kTools))["choices"][0]["message"]["content"], "ok");
  // Valid schemas with keywords the grammar engine cannot enforce are fine in auto mode (draft-07
  // tuple items, patternProperties, true / false subschemas).
  EXPECT_EQ(NonStream(Body(R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "patternProperties":{"x":{}},"properties":{"t":{"type":"array","items":[{"type":"string"},true]},"u":false}}}}])"))
                ["choices"][0]["message"]["content"],
            "ok");
}

TEST_F(ChatToolsTest, ParsersCanBeTurnedOff) {
  OpenAIServiceOptions options;
  options.reasoning_parser = chat_parse::ReasoningFormat::kNone;
  options.tool_call_parser = chat_parse::ToolCallFormat::kNone;
  Make(options, 1024);
  Script("<think>\n\n</think>\n\nhi");
  json j = NonStream(Body(std::string("\"tools\":") + kTools));
  EXPECT_EQ(j["choices"][0]["message"], json({{"role", "assistant"}, {"content", "<think>\n\n</think>\n\nhi"}}));
  EXPECT_FALSE(j["usage"].contains("completion_tokens_details"));
}


TEST_F(ChatToolsTest, StrictFunctionsAreConstrainedInAuto) {
  const std::string strict = R"("tools":[{"type":"function","function":{"name":"get_weather","strict":true,
      "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])";
  Script("It is sunny.");
  NonStream(Body(strict));
  EXPECT_EQ(engine->submitted().back().params.structured.kind, grammar::StructuredKind::kGrammar);
  NonStream(Body(std::string("\"tools\":") + kTools));  // not strict: unconstrained
  EXPECT_EQ(engine->submitted().back().params.structured.kind, grammar::StructuredKind::kNone);
}


TEST_F(ChatToolsTest, ForcedCallsFollowALlama3JsonServer) {
  const std::string spec = ForcedCallGrammar(chat_parse::ToolCallFormat::kLlama3Json,
                                             "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Paris\"}}");
  EXPECT_NE(spec.find("parameters"), std::string::npos);
  EXPECT_EQ(spec.find("tool_call"), std::string::npos);
}


TEST_F(ChatToolsTest, StreamedLogprobsCoverEveryTokenWhenTextIsHeldBack) {
  Script("<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>");
  auto w = Post("/v1/chat/completions", Body(std::string("\"tools\":") + kTools + R"(,"stream":true,"logprobs":true,"n":2)"));
  ASSERT_EQ(w->status, 200);
  size_t entries[2] = {0, 0};
  int calls[2] = {0, 0};
  for (const json& e : SseEvents(w->body)) {
    const json& c = e["choices"][0];
    const int i = c["index"];
    if (c["logprobs"].is_object()) entries[i] += c["logprobs"]["content"].size();
    if (c["delta"].contains("tool_calls") && c["delta"]["tool_calls"][0].contains("id")) ++calls[i];
    if (c["delta"].contains("content")) {
      EXPECT_EQ(c["delta"]["content"].get<std::string>().find("<"), std::string::npos);
    }
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(entries[i], engine->script.tokens.size()) << "choice " << i;
    EXPECT_EQ(calls[i], 1) << "choice " << i;
  }
}


TEST_F(ChatToolsTest, ForcedCallsFollowAQwen3CoderServer) {
  const std::string spec = ForcedCallGrammar(
      chat_parse::ToolCallFormat::kQwen3Coder,
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>");
  EXPECT_NE(spec.find("<function=get_weather>"), std::string::npos);
}


TEST_F(ChatToolsTest, ForcedCallsFollowAMistralServer) {
  const std::string spec =
      ForcedCallGrammar(chat_parse::ToolCallFormat::kMistral,
                        "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}]");
  EXPECT_NE(spec.find("[TOOL_CALLS]"), std::string::npos);
  EXPECT_EQ(spec.find("tool_call>"), std::string::npos);
  // The marker is a special token of Mistral's tokenizer: the detokenizer must keep it.
  EXPECT_FALSE(engine->submitted().back().params.skip_special_tokens);
  NonStream(Body(std::string("\"tools\":") + kTools));  // auto
  EXPECT_FALSE(engine->submitted().back().params.skip_special_tokens);
  NonStream(Body(R"("temperature":0)"));  // no tools: as asked
  EXPECT_TRUE(engine->submitted().back().params.skip_special_tokens);
}


// With --reasoning-parser none nothing takes a think block out again, so an enforced call may not
// start with one (it stayed in content in front of a llama3_json call, which then did not parse).
TEST_F(ChatToolsTest, ForcedCallsAllowAThinkBlockOnlyWithAReasoningParser) {
  const std::string call = "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Paris\"}}";
  EXPECT_NE(ForcedCallGrammar(chat_parse::ToolCallFormat::kLlama3Json, call).find("<think>"), std::string::npos);
  OpenAIServiceOptions options;
  options.tool_call_parser = chat_parse::ToolCallFormat::kLlama3Json;
  options.reasoning_parser = chat_parse::ReasoningFormat::kNone;
  Make(options, 1024);
  Script(call);
  json j = NonStream(Body(std::string("\"tools\":") + kTools +
                          R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(engine->submitted().back().params.structured.spec.find("<think>"), std::string::npos);
}


// Cut off by max_tokens inside its call: the call is parsed as far as it goes, but the choice says
// "length" (streamed and not), so a client knows its arguments may be cut off.
TEST_F(ChatToolsTest, ACallCutOffByMaxTokensFinishesWithLength) {
  Script("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
  const int cut = static_cast<int>(engine->script.tokens.size()) - 2;  // before the end tag
  const std::string head = std::string(R"({"messages":[{"role":"user","content":"Weather?"}],"max_tokens":)") +
                           std::to_string(cut) + ",\"tools\":" + kTools;
  json j = NonStream(head + "}");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  std::string finish;
  Stream(head + R"(,"stream":true})", &finish);
  EXPECT_EQ(finish, "length");
  json done = NonStream(Body(std::string("\"tools\":") + kTools));  // the whole call
  EXPECT_EQ(done["choices"][0]["finish_reason"], "tool_calls");
}


TEST_F(ChatToolsTest, StructuredOutputContentIsReturnedAsItIs) {
  Script("{\"a\": \"<think>x</think>\"}");
  json j = NonStream(Body(R"("response_format":{"type":"json_object"})"));
  EXPECT_EQ(j["choices"][0]["message"]["content"], "{\"a\": \"<think>x</think>\"}");
}

}  // namespace
}  // namespace tandem::testing
