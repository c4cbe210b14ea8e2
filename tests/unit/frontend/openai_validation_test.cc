// Request validation: every bad input answers an OpenAI-style error with the right status and param.
#include <string>
#include <vector>

#include "frontend/openai_request.h"
#include "openai_test_util.h"

namespace tandem::testing {
namespace {

struct BadCase {
  const char* name;
  const char* path;
  std::string body;
  int status;
  const char* param;  // nullptr: JSON null
  const char* code = nullptr;  // checked when set
};

const char* kChat = "/v1/chat/completions";
const char* kCompl = "/v1/completions";
const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

std::string ChatBody(const std::string& extra) { return "{" + kMsgs + "," + extra + "}"; }
std::string ComplBody(const std::string& extra) { return R"({"prompt":"hi",)" + extra + "}"; }

std::vector<BadCase> Cases() {
  return {
      {"malformed", kChat, "{\"messages\": [", 400, nullptr},
      {"truncated", kChat, R"({"messages":[{"role":"user","content":"hi"}])", 400, nullptr},
      {"not_json", kChat, "hello", 400, nullptr},
      {"array_body", kChat, "[1,2]", 400, nullptr},
      {"string_body", kCompl, "\"hi\"", 400, nullptr},
      {"messages_string", kChat, R"({"messages":"hi"})", 400, "messages", "invalid_type"},
      {"messages_missing", kChat, R"({"model":"tiny-qwen3"})", 400, "messages"},
      {"messages_empty", kChat, R"({"messages":[]})", 400, "messages"},
      {"message_not_object", kChat, R"({"messages":["hi"]})", 400, "messages[0]"},
      {"unknown_role", kChat, R"({"messages":[{"role":"wizard","content":"hi"}]})", 400,
       "messages[0].role"},
      {"role_not_string", kChat, R"({"messages":[{"role":1,"content":"hi"}]})", 400,
       "messages[0].role"},
      {"content_number", kChat, R"({"messages":[{"role":"user","content":5}]})", 400,
       "messages[0].content"},
      {"content_missing", kChat, R"({"messages":[{"role":"user"}]})", 400, "messages[0].content"},
      {"content_image", kChat,
       R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
       400, "messages[0].content[0].type"},
      {"max_tokens_string", kChat, ChatBody(R"("max_tokens":"ten")"), 400, "max_tokens",
       "invalid_type"},
      {"max_tokens_zero", kChat, ChatBody(R"("max_tokens":0)"), 400, "max_tokens"},
      {"max_tokens_negative", kCompl, ComplBody(R"("max_tokens":-5)"), 400, "max_tokens"},
      {"max_tokens_fraction", kChat, ChatBody(R"("max_tokens":1.5)"), 400, "max_tokens"},
      {"max_completion_tokens_zero", kChat, ChatBody(R"("max_completion_tokens":0)"), 400,
       "max_completion_tokens"},
      {"max_tokens_beyond_context", kChat, ChatBody(R"("max_tokens":250)"), 400, "max_tokens",
       "context_length_exceeded"},
      {"max_completion_tokens_beyond_context", kChat, ChatBody(R"("max_completion_tokens":1000)"),
       400, "max_completion_tokens", "context_length_exceeded"},
      {"stream_string", kChat, ChatBody(R"("stream":"yes")"), 400, "stream", "invalid_type"},
      {"stream_options_string", kChat, ChatBody(R"("stream":true,"stream_options":"x")"), 400,
       "stream_options"},
      {"n_zero", kChat, ChatBody(R"("n":0)"), 400, "n"},
      {"n_too_large", kCompl, ComplBody(R"("n":17)"), 400, "n"},
      {"n_string", kChat, ChatBody(R"("n":"2")"), 400, "n"},
      {"temperature_high", kChat, ChatBody(R"("temperature":2.5)"), 400, "temperature"},
      {"temperature_negative", kCompl, ComplBody(R"("temperature":-0.1)"), 400, "temperature"},
      {"temperature_string", kChat, ChatBody(R"("temperature":"hot")"), 400, "temperature"},
      {"top_p_zero", kChat, ChatBody(R"("top_p":0)"), 400, "top_p"},
      {"top_p_high", kChat, ChatBody(R"("top_p":1.01)"), 400, "top_p"},
      {"top_k_low", kChat, ChatBody(R"("top_k":-2)"), 400, "top_k"},
      {"top_k_float", kChat, ChatBody(R"("top_k":2.5)"), 400, "top_k"},
      {"min_p_high", kChat, ChatBody(R"("min_p":1.5)"), 400, "min_p"},
      {"frequency_penalty", kChat, ChatBody(R"("frequency_penalty":2.5)"), 400,
       "frequency_penalty"},
      {"presence_penalty", kCompl, ComplBody(R"("presence_penalty":-3)"), 400, "presence_penalty"},
      {"repetition_penalty", kChat, ChatBody(R"("repetition_penalty":0)"), 400,
       "repetition_penalty"},
      // Valid doubles that the engine's 32-bit floats cannot hold: inf, or 0 where > 0 is needed.
      {"repetition_penalty_overflow", kCompl, ComplBody(R"("repetition_penalty":1e308)"), 400,
       "repetition_penalty", "invalid_value"},
      {"repetition_penalty_to_zero", kCompl, ComplBody(R"("repetition_penalty":5e-324)"), 400,
       "repetition_penalty", "invalid_value"},
      {"top_p_to_zero", kChat, ChatBody(R"("top_p":5e-324)"), 400, "top_p", "invalid_value"},
      {"top_p_tiny", kChat, ChatBody(R"("top_p":1e-50)"), 400, "top_p", "invalid_value"},
      // Accepted and ignored before: 400 "not supported".
      {"logit_bias", kChat, ChatBody(R"("logit_bias":{"42":100})"), 400, "logit_bias"},
      {"logit_bias_list", kCompl, ComplBody(R"("logit_bias":[1])"), 400, "logit_bias",
       "invalid_type"},
      // Structured outputs (structured_output_params.h): a bad spec names its parameter.
      {"response_format_type", kChat, ChatBody(R"("response_format":{"type":"yaml"})"), 400,
       "response_format.type"},
      {"response_format_schema", kCompl,
       ComplBody(R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","format":"hostname"}}})"),
       400, "response_format.json_schema.schema"},
      {"response_format_keyword", kChat,
       ChatBody(R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"array","uniqueItems":true}}})"),
       400, "response_format.json_schema.schema"},
      {"response_format_string", kChat, ChatBody(R"("response_format":"json")"), 400,
       "response_format", "invalid_type"},
      {"guided_regex_bad", kCompl, ComplBody(R"("guided_regex":"(a")"), 400, "guided_regex"},
      {"guided_regex_number", kCompl, ComplBody(R"("guided_regex":5)"), 400, "guided_regex"},
      {"guided_choice_empty", kChat, ChatBody(R"("guided_choice":[])"), 400, "guided_choice"},
      {"guided_grammar_bad", kCompl, ComplBody(R"("guided_grammar":"root ::= root")"), 400,
       "guided_grammar"},
      {"guided_json_string_bad", kCompl, ComplBody(R"("guided_json":"{not json")"), 400,
       "guided_json"},
      {"two_structured", kChat,
       ChatBody(R"("guided_regex":"a+","response_format":{"type":"json_object"})"), 400,
       "guided_regex"},
      {"structured_outputs_unknown", kChat, ChatBody(R"("structured_outputs":{"yaml":"x"})"), 400,
       "structured_outputs.yaml"},
      {"guided_whitespace_pattern", kChat, ChatBody(R"("guided_whitespace_pattern":" ")"), 400,
       "guided_whitespace_pattern"},
      {"tool_choice_required", kChat, ChatBody(R"("tool_choice":"required")"), 400, "tool_choice"},
      {"tool_choice_function", kChat,
       ChatBody(R"("tool_choice":{"type":"function","function":{"name":"f"}})"), 400,
       "tool_choice"},
      {"tool_choice_unknown", kChat, ChatBody(R"("tool_choice":"maybe")"), 400, "tool_choice"},
      {"min_tokens", kCompl, ComplBody(R"("min_tokens":5)"), 400, "min_tokens"},
      {"min_tokens_negative", kChat, ChatBody(R"("min_tokens":-1)"), 400, "min_tokens"},
      {"include_stop_str_in_output", kChat, ChatBody(R"("include_stop_str_in_output":true)"), 400,
       "include_stop_str_in_output"},
      {"seed_string", kChat, ChatBody(R"("seed":"x")"), 400, "seed"},
      {"seed_above_int64", kCompl, ComplBody(R"("seed":9223372036854775808)"), 400, "seed"},
      {"stop_number", kChat, ChatBody(R"("stop":5)"), 400, "stop"},
      {"stop_list_of_numbers", kChat, ChatBody(R"("stop":["a",1])"), 400, "stop"},
      {"logprobs_string", kChat, ChatBody(R"("logprobs":"yes")"), 400, "logprobs"},
      {"top_logprobs_21", kChat, ChatBody(R"("logprobs":true,"top_logprobs":21)"), 400,
       "top_logprobs"},
      {"top_logprobs_without_logprobs", kChat, ChatBody(R"("top_logprobs":2)"), 400,
       "top_logprobs"},
      {"completion_logprobs_21", kCompl, ComplBody(R"("logprobs":21)"), 400, "logprobs"},
      {"completion_logprobs_bool", kCompl, ComplBody(R"("logprobs":true)"), 400, "logprobs"},
      {"prompt_missing", kCompl, R"({"max_tokens":3})", 400, "prompt"},
      {"prompt_number", kCompl, R"({"prompt":5})", 400, "prompt"},
      {"prompt_empty", kCompl, R"({"prompt":""})", 400, "prompt"},
      {"prompt_two", kCompl, R"({"prompt":["a","b"]})", 400, "prompt"},
      {"prompt_bad_token", kCompl, R"({"prompt":[1, 99999999]})", 400, "prompt"},
      {"echo_string", kCompl, ComplBody(R"("echo":"yes")"), 400, "echo"},
      {"tools_object", kChat, ChatBody(R"("tools":{})"), 400, "tools"},
      {"chat_template_kwargs_list", kChat, ChatBody(R"("chat_template_kwargs":[])"), 400,
       "chat_template_kwargs"},
      {"unknown_model_chat", kChat, ChatBody(R"("model":"gpt-4")"), 404, "model",
       "model_not_found"},
      {"unknown_model_completion", kCompl, ComplBody(R"("model":"nope")"), 404, "model",
       "model_not_found"},
  };
}

class ValidationTest : public OpenAITest, public ::testing::WithParamInterface<BadCase> {};

TEST_P(ValidationTest, AnswersOpenAIError) {
  const BadCase& c = GetParam();
  auto w = Post(c.path, c.body);
  EXPECT_EQ(w->status, c.status) << w->body;
  EXPECT_EQ(w->content_type, "application/json");
  EXPECT_EQ(w->num_start, 0);
  json j = json::parse(w->body);
  ASSERT_TRUE(j.contains("error")) << w->body;
  const json& e = j["error"];
  EXPECT_TRUE(e["message"].is_string());
  EXPECT_FALSE(e["message"].get<std::string>().empty());
  EXPECT_EQ(e["type"], "invalid_request_error");
  if (c.param) EXPECT_EQ(e["param"], c.param) << w->body;
  else EXPECT_TRUE(e["param"].is_null()) << w->body;
  if (c.code) {
    EXPECT_EQ(e["code"], c.code) << w->body;
  }
  EXPECT_TRUE(engine->submitted().empty()) << "a rejected request reached the engine";
  EXPECT_TRUE(w->headers.count("x-request-id"));
}

INSTANTIATE_TEST_SUITE_P(BadRequests, ValidationTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(OpenAITest, UnknownRoleIsNamed) {
  auto w = Post(kChat, R"({"messages":[{"role":"wizard","content":"hi"}]})");
  EXPECT_NE(w->Json()["error"]["message"].get<std::string>().find("wizard"), std::string::npos);
}

// Client text in error messages (and the log) is escaped and bounded: a model name with a newline
// and a terminal escape cannot forge a log line, a 7 MB one does not make a 7 MB answer.
TEST_F(OpenAITest, ClientTextInErrorsIsEscapedAndTruncated) {
  const std::string forged = "x\n2026-12-01T00:00:00.000 error FAKE LOG LINE \x1b[31mred";
  auto w = Complete(json{{"prompt", "hi"}, {"model", forged}});
  EXPECT_EQ(w->status, 404);
  std::string msg = w->Json()["error"]["message"];
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\x1b'), std::string::npos) << msg;
  EXPECT_NE(msg.find("x\\n2026"), std::string::npos) << msg;

  const std::string big(7u << 20, 'm');
  w = Complete(json{{"prompt", "hi"}, {"model", big}});
  EXPECT_EQ(w->status, 404);
  EXPECT_LT(w->body.size(), 1000u);
  w = Chat(json{{"messages", json::array({json{{"role", big}, {"content", "hi"}}})}});
  EXPECT_EQ(w->status, 400);
  EXPECT_LT(w->body.size(), 1000u);
  EXPECT_EQ(w->Json()["error"]["param"], "messages[0].role");
}

TEST_F(OpenAITest, ContextErrorsNameTheNumbers) {
  auto w = Post(kCompl, R"({"prompt":"hello there","max_tokens":300})");
  std::string prompt_len = std::to_string(tokenizer_->Encode("hello there").size());
  std::string msg = w->Json()["error"]["message"];
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
  EXPECT_NE(msg.find("300"), std::string::npos) << msg;
  EXPECT_NE(msg.find(prompt_len), std::string::npos) << msg;

  std::string long_text;
  for (int i = 0; i < 300; ++i) long_text += " hello";
  w = Complete(json{{"prompt", long_text}});
  EXPECT_EQ(w->status, 400);
  EXPECT_EQ(w->Json()["error"]["param"], "prompt");
  EXPECT_EQ(w->Json()["error"]["code"], "context_length_exceeded");
  msg = w->Json()["error"]["message"];
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(tokenizer_->Encode(long_text).size())), std::string::npos) << msg;

  w = Chat(json{{"messages", UserMessages(long_text)}});
  EXPECT_EQ(w->status, 400);
  EXPECT_EQ(w->Json()["error"]["param"], "messages");
}

// A prompt certainly beyond the context is refused before it is tokenized (6 MB of letters took
// ~6 s of an HTTP thread to tokenize): the error's "at least N input tokens (B bytes)" comes from
// the byte bound, which runs first. Whitespace, which a token may swallow in any amount, does not
// count towards that bound. (No wall-clock bound here: under ASan parsing the 6 MB body alone
// took 5 s.)
TEST_F(OpenAITest, HugePromptIsRefusedBeforeTokenizing) {
  std::string text(6u << 20, 'a');
  uint32_t x = 12345;
  for (char& c : text) c = static_cast<char>('a' + (x = x * 1103515245u + 12345u) % 26u);
  for (bool chat : {false, true}) {
    auto w = chat ? Chat(json{{"messages", UserMessages(text)}}) : Complete(json{{"prompt", text}});
    EXPECT_EQ(w->status, 400);
    json e = w->Json()["error"];
    EXPECT_EQ(e["code"], "context_length_exceeded");
    EXPECT_EQ(e["param"], chat ? "messages" : "prompt");
    EXPECT_NE(e["message"].get<std::string>().find("at least"), std::string::npos) << e;
  }
  auto w = Complete(json{{"prompt", std::string(40000, ' ') + "hi"}});
  EXPECT_EQ(w->status, 400);
  EXPECT_EQ(w->Json()["error"]["message"].get<std::string>().find("at least"), std::string::npos);
  EXPECT_EQ(w->Json()["error"]["code"], "context_length_exceeded");
}

// A body nested deeper than kMaxRequestNesting is a 400 before anything recurses over it (30,000
// nested arrays in a tool's parameters, 60 KB, took the server down with a stack overflow in the
// template's value conversion), wherever the nesting is; one level less is still a valid body;
// the server keeps serving.
TEST_F(OpenAITest, DeeplyNestedBodiesAreA400) {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  const std::string head = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2,)";
  const std::string tool = R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","x":)";
  for (const std::string& body : std::vector<std::string>{head + tool + nested(30000) + "}}}]}",
                                  R"({"messages":[{"role":"user","content":"hi","x":)" + nested(30000) + "}]}",
                                  head + R"("x":)" + nested(openai::kMaxRequestNesting) + "}"}) {
    auto w = Post("/v1/chat/completions", body);
    ASSERT_EQ(w->status, 400) << w->body.substr(0, 300);
    EXPECT_NE(w->Json()["error"]["message"].get<std::string>().find("nested deeper than 512"), std::string::npos)
        << w->body;
  }
  auto w = Post("/v1/completions", R"({"prompt":"hi","max_tokens":2,"x":)" + nested(30000) + "}");
  EXPECT_EQ(w->status, 400);
  // kMaxRequestNesting - 1 arrays under the top-level object: kMaxRequestNesting levels in all.
  w = Post("/v1/chat/completions", head + R"("x":)" + nested(openai::kMaxRequestNesting - 1) + "}");
  EXPECT_EQ(w->status, 200) << w->body.substr(0, 300);
  w = Chat(json{{"messages", UserMessages("still serving")}, {"max_tokens", 2}});
  EXPECT_EQ(w->status, 200) << w->body;
}

// ordered_json inserts each key after comparing it with the object's earlier ones: a body of one
// 80 k-key object took 4 s to parse. Past ~11.5 k keys (in one object, or many together) a 400,
// in linear time; a 5 k-key object (logit_bias-like) is still served.
TEST_F(OpenAITest, ObjectsWithTooManyKeysAreA400) {
  auto keys = [](int n) {
    std::string s = "{";
    for (int i = 0; i < n; ++i) s += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
    return s + "}";
  };
  for (int n : {12000, 300000}) {
    auto w = Post("/v1/completions", R"({"prompt":"hi","max_tokens":2,"extra":)" + keys(n) + "}");
    ASSERT_EQ(w->status, 400) << w->body.substr(0, 300);
    EXPECT_NE(w->Json()["error"]["message"].get<std::string>().find("too many keys"), std::string::npos) << w->body;
  }
  auto w = Post("/v1/completions", R"({"prompt":"hi","max_tokens":2,"extra":)" + keys(5000) + "}");
  EXPECT_EQ(w->status, 200) << w->body.substr(0, 300);
  w = Chat(json{{"messages", UserMessages("still serving")}, {"max_tokens", 2}});
  EXPECT_EQ(w->status, 200) << w->body;
}

// Without max_tokens: chat goes up to the context (max_model_len 256 here); completions stop at
// 16 as OpenAI's and vLLM's do, or sooner when the context ends.
TEST_F(OpenAITest, MaxTokensDefaults) {
  auto w = Complete(json{{"prompt", "hello there"}, {"max_tokens", 256 - 2}});
  EXPECT_EQ(w->status, 200) << w->body;
  w = Complete(json{{"prompt", "hello there"}});
  EXPECT_EQ(w->status, 200) << w->body;
  w = Chat(json{{"messages", UserMessages("hello there")}});
  EXPECT_EQ(w->status, 200) << w->body;
  w = Complete(json{{"prompt", std::vector<int>(250, 1000)}});
  EXPECT_EQ(w->status, 200) << w->body;
  auto subs = engine->submitted();
  ASSERT_EQ(subs.size(), 4u);
  EXPECT_EQ(subs[0].params.max_tokens, 254);
  EXPECT_EQ(subs[1].params.max_tokens, 16);
  EXPECT_EQ(subs[2].params.max_tokens, 256 - static_cast<int>(subs[2].prompt_token_ids.size()));
  EXPECT_EQ(subs[3].params.max_tokens, 6);
}

TEST_F(OpenAITest, SamplingParamsReachTheEngine) {
  auto w = Chat(json{{"messages", UserMessages("hi")},
                     {"temperature", 0.5},
                     {"top_p", 0.9},
                     {"top_k", 40},
                     {"min_p", 0.05},
                     {"seed", 7},
                     {"frequency_penalty", 0.5},
                     {"presence_penalty", -0.5},
                     {"repetition_penalty", 1.1},
                     {"stop", "END"},
                     {"ignore_eos", true},
                     {"skip_special_tokens", false},
                     {"max_completion_tokens", 9},
                     {"max_tokens", 20},
                     {"user", "someone"},
                     {"logprobs", true},
                     {"top_logprobs", 3},
                     {"unknown_field", 1}});
  ASSERT_EQ(w->status, 200) << w->body;
  auto subs = engine->submitted();
  ASSERT_EQ(subs.size(), 1u);
  const SamplingParams& p = subs[0].params;
  EXPECT_FLOAT_EQ(p.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.top_p, 0.9f);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_FLOAT_EQ(p.min_p, 0.05f);
  EXPECT_EQ(p.seed, 7u);
  EXPECT_FLOAT_EQ(p.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.presence_penalty, -0.5f);
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.1f);
  EXPECT_EQ(p.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_EQ(p.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_EQ(p.logprobs, 3);
}

// Tiny values that round to 0.0f are fine where 0 is allowed.
TEST_F(OpenAITest, TinyFloatsWhereZeroIsAllowed) {
  auto w = Complete(json{{"prompt", "hi"}, {"temperature", 5e-324}, {"min_p", 5e-324},
                         {"presence_penalty", -5e-324}, {"frequency_penalty", 1e-300}});
  ASSERT_EQ(w->status, 200) << w->body;
  EXPECT_EQ(engine->submitted()[0].params.temperature, 0.0f);
}

// The no-op forms of unsupported parameters that clients send by default stay accepted.
TEST_F(OpenAITest, NoOpFormsOfUnsupportedParametersAreAccepted) {
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"logit_bias", json::object()},
                     {"response_format", {{"type", "text"}}}, {"tool_choice", "auto"},
                     {"min_tokens", 0}, {"include_stop_str_in_output", false}});
  EXPECT_EQ(w->status, 200) << w->body;
  w = Chat(json{{"messages", UserMessages("hi")}, {"logit_bias", nullptr},
                {"response_format", nullptr}, {"tool_choice", "none"}, {"min_tokens", nullptr}});
  EXPECT_EQ(w->status, 200) << w->body;
  w = Complete(json{{"prompt", "hi"}, {"logit_bias", json::object()}, {"min_tokens", 0}});
  EXPECT_EQ(w->status, 200) << w->body;
  w = Chat(json{{"messages", UserMessages("hi")}, {"logit_bias", {{"42", 100}}}});
  EXPECT_NE(w->Json()["error"]["message"].get<std::string>().find("not supported"),
            std::string::npos) << w->body;
}

TEST_F(OpenAITest, NullFieldsMeanDefaults) {
  auto w = Complete(json{{"prompt", "hi"}, {"max_tokens", nullptr}, {"temperature", nullptr},
                         {"stop", nullptr}, {"logprobs", nullptr}, {"n", nullptr}});
  ASSERT_EQ(w->status, 200) << w->body;
  EXPECT_EQ(engine->submitted()[0].params.logprobs, -1);
  EXPECT_FLOAT_EQ(engine->submitted()[0].params.temperature, 1.0f);
}

}  // namespace
}  // namespace tandem::testing
