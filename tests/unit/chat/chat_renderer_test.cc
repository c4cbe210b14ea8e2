// ChatRenderer on the bundled Qwen3 model: the golden cases, Qwen3 scenarios against jinja2, and
// literal ranges for special-token text in message content.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "chat/template.h"
#include "chat_test_util.h"
#include "common/file_util.h"

namespace tandem {
namespace {

using chat_test::ojson;

ChatRenderer LoadQwen3() {
  auto r = ChatRenderer::Load(DefaultModelDir());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

TEST(ChatRendererTest, GoldenCasesRenderByteIdentically) {
  auto golden = ReadJsonFile(std::string(TANDEM_GOLDEN_DIR) + "/tiny-qwen3.json");
  ASSERT_TRUE(golden.ok()) << golden.status().ToString();
  ChatRenderer renderer = LoadQwen3();
  const auto& cases = (*golden)["chat_template"];
  ASSERT_GE(cases.size(), 1u);
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE("golden chat_template case " + std::to_string(k));
    const auto& c = cases[k];
    ChatOptions options;
    options.add_generation_prompt = c.value("add_generation_prompt", false);
    options.extra_kwargs = ojson::object();
    if (c.contains("enable_thinking")) options.extra_kwargs["enable_thinking"] = c["enable_thinking"];
    auto r = renderer.Render(c["messages"], options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->text, c["rendered"].get<std::string>());
    EXPECT_TRUE(r->literal_ranges.empty());
  }
}

// The context ChatRenderer passes for these options (see chat_template.h), for the oracle.
ojson OracleContext(const ojson& messages, const ChatOptions& o) {
  ojson ctx = ojson::object();
  ctx["messages"] = messages;
  ctx["tools"] = o.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = o.add_generation_prompt;
  ctx["eos_token"] = "<|im_end|>";  // the bundled config has no bos_token
  if (o.extra_kwargs.is_object())
    for (auto it = o.extra_kwargs.begin(); it != o.extra_kwargs.end(); ++it) ctx[it.key()] = it.value();
  return ctx;
}

struct Scenario {
  std::string name;
  ojson messages;
  ChatOptions options;
};

std::vector<Scenario> Qwen3Scenarios() {
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search_web", "description": "Search the web; returns «snippets»",
      "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "max_results": {"type": "integer", "default": 5}},
        "required": ["query"]}}}])");
  auto opts = [](bool agp, ojson extra, ojson tools = nullptr) {
    ChatOptions o;
    o.add_generation_prompt = agp;
    o.extra_kwargs = std::move(extra);
    o.tools = std::move(tools);
    return o;
  };
  const ojson think_false = {{"enable_thinking", false}};
  const ojson think_true = {{"enable_thinking", true}};
  const ojson none = ojson::object();
  std::vector<Scenario> s;
  s.push_back({"user only, thinking absent", ojson::parse(R"([{"role":"user","content":"Hi"}])"), opts(true, none)});
  s.push_back({"user only, no generation prompt", ojson::parse(R"([{"role":"user","content":"Hi"}])"), opts(false, none)});
  s.push_back({"system + user, thinking false",
               ojson::parse(R"([{"role":"system","content":"You are terse."},{"role":"user","content":"Hello"}])"),
               opts(true, think_false)});
  s.push_back({"system + user, thinking true",
               ojson::parse(R"([{"role":"system","content":"You are terse."},{"role":"user","content":"Hello"}])"),
               opts(true, think_true)});
  const ojson multi = ojson::parse(R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Hello."},{"role":"user","content":"What is 2+2?"},
      {"role":"assistant","content":"4"},{"role":"user","content":"Bye"}])");
  s.push_back({"multi-turn, thinking false", multi, opts(true, think_false)});
  s.push_back({"multi-turn, thinking true, no generation prompt", multi, opts(false, think_true)});
  s.push_back({"multi-turn, thinking absent", multi, opts(true, none)});
  s.push_back({"tools with system", ojson::parse(R"([{"role":"system","content":"Use tools."},{"role":"user","content":"Weather in Paris?"}])"),
               opts(true, think_false, tools)});
  s.push_back({"tools without system", ojson::parse(R"([{"role":"user","content":"Weather in Paris?"}])"),
               opts(true, none, tools)});
  s.push_back({"assistant history with <think> in content", ojson::parse(R"([
      {"role":"user","content":"Q1"},
      {"role":"assistant","content":"<think>\nLet me think.\n</think>\n\nA1"},
      {"role":"user","content":"Q2"},
      {"role":"assistant","content":"<think>\nShort.\n</think>\n\nA2"}])"), opts(false, none)});
  s.push_back({"assistant with reasoning_content field", ojson::parse(R"([
      {"role":"user","content":"Q1"},
      {"role":"assistant","content":"A1","reasoning_content":"first reasoning"},
      {"role":"user","content":"Q2"},
      {"role":"assistant","content":"A2","reasoning_content":"\nsecond reasoning\n"}])"), opts(true, think_true)});
  s.push_back({"two user turns in a row", ojson::parse(R"([{"role":"user","content":"One"},{"role":"user","content":"Two"}])"),
               opts(true, think_false)});
  s.push_back({"tool calls and tool responses", ojson::parse(R"([
      {"role":"user","content":"Weather in Paris and Rome?"},
      {"role":"assistant","content":"","tool_calls":[
        {"type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","unit":"celsius"}}},
        {"type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Rome\"}"}}]},
      {"role":"tool","content":"{\"temp\": 18}"},
      {"role":"tool","content":"{\"temp\": 24}"},
      {"role":"assistant","content":"<think>\nBoth known.\n</think>\n\nParis 18°C, Rome 24°C."},
      {"role":"user","content":"<tool_response>\nmanual\n</tool_response>"},
      {"role":"assistant","content":"Noted.","tool_calls":[{"name":"search_web","arguments":{"query":"x"}}]},
      {"role":"tool","content":"done"}])"), opts(true, think_false, tools)});
  s.push_back({"non-ASCII and emoji", ojson::parse(R"([{"role":"system","content":"Réponds en français 🇫🇷"},
      {"role":"user","content":"日本語のテキスト 😀 — «quotes» \"dq\" \\ back\ttab"}])"), opts(true, think_false)});
  s.push_back({"special-token text in content", ojson::parse(R"([{"role":"user","content":"say <|im_end|> and <|endoftext|><|im_start|>"},
      {"role":"assistant","content":"ok <|im_end|>"},{"role":"user","content":"<|im_start|>"}])"), opts(true, none)});
  return s;
}

TEST(ChatRendererTest, Qwen3ScenariosMatchJinja2) {
  ChatRenderer renderer = LoadQwen3();
  const std::string source = chat_test::Qwen3Template();
  std::vector<Scenario> scenarios = Qwen3Scenarios();
  std::vector<chat_test::OracleCase> cases;
  for (const auto& s : scenarios) cases.push_back({s.name, source, OracleContext(s.messages, s.options)});
  std::vector<chat_test::OracleResult> expected = chat_test::RenderWithJinja2(cases);
  ASSERT_EQ(expected.size(), scenarios.size());
  for (size_t k = 0; k < scenarios.size(); ++k) {
    SCOPED_TRACE("scenario '" + scenarios[k].name + "'");
    ASSERT_TRUE(expected[k].ok) << expected[k].output;
    auto r = renderer.Render(scenarios[k].messages, scenarios[k].options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->text, expected[k].output);
  }
}

TEST(ChatRendererTest, SpecialTokenTextInContentIsLiteral) {
  ChatRenderer renderer = LoadQwen3();
  ChatOptions options;
  auto r = renderer.Render(ojson::parse(R"([{"role":"user","content":"a<|im_end|>b"}])"), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->text, "<|im_start|>user\na<|im_end|>b<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_EQ(r->literal_ranges.size(), 1u);
  const auto [b, e] = r->literal_ranges[0];
  EXPECT_EQ(r->text.substr(b, e - b), "<|im_end|>");
  EXPECT_EQ(b, std::string("<|im_start|>user\na").size());
}

TEST(ChatRendererTest, LiteralRangesAreSortedAndCoverEachOccurrence) {
  ChatRenderer renderer = LoadQwen3();
  ChatOptions options;
  options.add_generation_prompt = false;
  auto r = renderer.Render(ojson::parse(R"([{"role":"system","content":"<|endoftext|>"},
      {"role":"user","content":"x<|im_start|><|im_start|>y \uE000 z"}])"), options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->text,
            "<|im_start|>system\n<|endoftext|><|im_end|>\n<|im_start|>user\nx<|im_start|><|im_start|>y \uE000 z<|im_end|>\n");
  ASSERT_EQ(r->literal_ranges.size(), 3u);
  std::vector<std::string> texts;
  for (size_t k = 0; k < r->literal_ranges.size(); ++k) {
    auto [b, e] = r->literal_ranges[k];
    texts.push_back(r->text.substr(b, e - b));
    if (k) {
      EXPECT_LE(r->literal_ranges[k - 1].second, b);
    }
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_start|>"}));
}

TEST(ChatRendererTest, LoadsChatTemplateJinjaAndNamedTemplates) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tandem_chat_load_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "tokenizer_config.json");
    f << R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
            "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}D{{ eos_token }}{{ x }}"}]})";
  }
  auto r = ChatRenderer::Load(dir.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ChatOptions o;
  o.extra_kwargs = {{"x", 1}};
  auto out = r->Render(ojson::array(), o);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->text, "<s>D</s>1");
  {
    std::ofstream f(dir / "chat_template.jinja");
    f << "J{{ messages | length }}\n";
  }
  r = ChatRenderer::Load(dir.string());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  out = r->Render(ojson::parse(R"([{"role":"user","content":"x"}])"), o);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->text, "J1");
  fs::remove_all(dir);
  EXPECT_EQ(ChatRenderer::Load(dir.string()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem
