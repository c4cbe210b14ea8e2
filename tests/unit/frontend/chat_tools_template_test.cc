// An agent conversation as the openai clients send it (an assistant message with content null and
// tool_calls whose arguments are JSON text, then role "tool" messages with tool_call_id), through
// the chat endpoint's parsing and our renderer, against Python's jinja2 rendering the client's
// messages with the bundled Qwen3 template, as transformers' apply_chat_template does
// (tests/tools/render_jinja.py, the environment of transformers' chat_template_utils).
// One difference, on purpose: with content None the Qwen3 template fails in jinja2 ("'None' has no
// attribute 'lstrip'"), so transformers cannot render what the clients send; the server passes ""
// (as vLLM does), and the oracle gets the same messages with null content as "".
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "frontend/openai_request.h"
#include "openai_test_util.h"

namespace tandem::testing {
namespace {

using ojson = nlohmann::ordered_json;

// jinja2's rendering of each context with `source`, or "ERROR: ..." per case.
std::vector<std::string> Jinja2(const std::string& source, const std::vector<ojson>& contexts) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tandem_tools_oracle_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path in = dir / "cases.json", out = dir / "out.json";
  ojson cases = ojson::array();
  for (const ojson& c : contexts) cases.push_back({{"template", source}, {"context", c}});
  std::ofstream(in, std::ios::binary) << cases.dump();
  const std::string cmd = "/usr/bin/python3 '" + std::string(TANDEM_TESTS_DIR) + "/tools/render_jinja.py' '" +
                          in.string() + "' '" + out.string() + "'";
  std::vector<std::string> results;
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "oracle failed: " << cmd;
  } else {
    std::ifstream f(out, std::ios::binary);
    for (const ojson& r : ojson::parse(f))
      results.push_back(r["ok"].get<bool>() ? r["output"].get<std::string>() : "ERROR: " + r["error"].get<std::string>());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return results;
}

class ChatToolsTemplateTest : public OpenAITest {};

TEST_F(ChatToolsTemplateTest, AgentTurnsRenderAsTransformersRendersThem) {
  const std::string tools = R"([{"type":"function","function":{"name":"get_weather","description":"Weather of a city",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])";
  const std::string history = R"([
      {"role":"system","content":"You are helpful."},
      {"role":"user","content":"Weather in Paris and Köln?"},
      {"role":"assistant","content":null,"reasoning_content":"Two cities.","tool_calls":[
        {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
        {"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Köln\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"{\"temp\": 18}"},
      {"role":"tool","tool_call_id":"call_2","content":"rainy, 11°C"}])";
  std::vector<std::string> bodies;
  std::vector<ojson> contexts;
  for (const char* kwargs : {"{}", R"({"enable_thinking":false})"}) {
    for (bool with_answer : {false, true}) {
      ojson messages = ojson::parse(history);
      if (with_answer) {
        messages.push_back({{"role", "assistant"}, {"content", "Paris 18°C, Köln rainy."}});
        messages.push_back({{"role", "user"}, {"content", "Thanks"}});
      }
      ojson body = {{"messages", messages}, {"tools", ojson::parse(tools)},
                    {"chat_template_kwargs", ojson::parse(kwargs)}};
      bodies.push_back(body.dump());
      // transformers: messages and tools as given, documents None, add_generation_prompt, the
      // tokenizer's special tokens (the bundled config has eos only), then the kwargs.
      ojson oracle_messages = messages;
      for (ojson& m : oracle_messages)
        if (m["content"].is_null()) m["content"] = "";
      ojson ctx = {{"messages", oracle_messages}, {"tools", body["tools"]}, {"documents", nullptr},
                   {"add_generation_prompt", true}, {"eos_token", "<|im_end|>"}};
      const ojson kw = ojson::parse(kwargs);
      for (auto it = kw.begin(); it != kw.end(); ++it) ctx[it.key()] = it.value();
      contexts.push_back(std::move(ctx));
    }
  }
  const std::vector<std::string> expected = Jinja2(renderer_->source(), contexts);
  ASSERT_EQ(expected.size(), bodies.size());
  for (size_t i = 0; i < bodies.size(); ++i) {
    openai::ParsedRequest req;
    openai::ParseOptions options{"tiny-qwen3", 16, chat_parse::ToolCallFormat::kHermes};
    auto e = openai::ParseRequest(openai::Endpoint::kChatCompletions, bodies[i], options, &req);
    ASSERT_FALSE(e) << e->message;
    auto rendered = renderer_->Render(req.messages, req.chat_options);
    ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
    EXPECT_EQ(rendered->text, expected[i]) << "case " << i;
    EXPECT_NE(expected[i].find("<tool_response>\nrainy, 11°C\n</tool_response>"), std::string::npos) << expected[i];
    EXPECT_NE(expected[i].find("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Köln\"}}"), std::string::npos);
  }
}

}  // namespace
}  // namespace tandem::testing
