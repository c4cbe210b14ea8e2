// Response shapes, streamed and not: chat and completions, usage, n > 1, logprobs, echo, and the
// byte-for-byte equality of joined stream deltas with the non-streamed text.
#include <set>
#include <string>

#include "openai_test_util.h"

namespace tandem::testing {
namespace {

// Concatenated chat deltas per choice index, and the finish reasons.
struct Joined {
  std::map<int, std::string> text;
  std::map<int, std::string> finish;
  std::map<int, int> num_role_chunks;
};

Joined JoinChat(const std::vector<json>& events) {
  Joined j;
  for (const json& e : events) {
    for (const json& c : e["choices"]) {
      int i = c["index"];
      const json& d = c["delta"];
      if (d.contains("role")) {
        EXPECT_EQ(d["role"], "assistant");
        EXPECT_EQ(d["content"], "");
        EXPECT_TRUE(j.text[i].empty()) << "role chunk after content";
        ++j.num_role_chunks[i];
      }
      if (d.contains("content")) j.text[i] += d["content"].get<std::string>();
      if (!c["finish_reason"].is_null()) {
        EXPECT_FALSE(j.finish.count(i)) << "two finish chunks";
        EXPECT_TRUE(d.empty()) << "finish chunk with a delta";
        j.finish[i] = c["finish_reason"];
      } else {
        EXPECT_FALSE(j.finish.count(i)) << "chunk after the finish chunk";
      }
    }
  }
  return j;
}

TEST_F(OpenAITest, ChatNonStreamShape) {
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"model", "tiny-qwen3"}});
  ASSERT_EQ(w->status, 200) << w->body;
  EXPECT_EQ(w->content_type, "application/json");
  json j = w->Json();
  std::string id = j["id"];
  EXPECT_EQ(id.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(id.size(), 9u + 32u);
  EXPECT_EQ(w->headers.at("x-request-id"), id);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], "tiny-qwen3");
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  // The Qwen3 template turns the qwen3 reasoning parser on: reasoning_content is there, null.
  EXPECT_EQ(c["message"], (json{{"role", "assistant"}, {"content", ScriptText()}, {"reasoning_content", nullptr}}));
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "stop");
  int prompt = static_cast<int>(engine->submitted()[0].prompt_token_ids.size());
  int completion = static_cast<int>(engine->script.tokens.size());
  EXPECT_EQ(j["usage"], (json{{"prompt_tokens", prompt},
                              {"completion_tokens", completion},
                              {"total_tokens", prompt + completion},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}},
                              {"completion_tokens_details", {{"reasoning_tokens", 0}}}}));
  // Key order as OpenAI writes it.
  std::vector<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
  std::set<std::string> expected{"id", "object", "created", "model", "choices", "usage"};
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()), expected);
  EXPECT_EQ(engine->submitted()[0].request_id, id + "-0");
}

TEST_F(OpenAITest, FinishReasonLength) {
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"max_tokens", 3}});
  json j = w->Json();
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  std::vector<int32_t> first3(engine->script.tokens.begin(), engine->script.tokens.begin() + 3);
  EXPECT_EQ(j["choices"][0]["message"]["content"], tokenizer_->Decode(first3, true));
}

TEST_F(OpenAITest, ChatStreamShape) {
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"stream", true}});
  ASSERT_EQ(w->status, 200);
  EXPECT_EQ(w->num_full, 0);
  EXPECT_EQ(w->content_type, "text/event-stream");
  EXPECT_TRUE(w->ended);
  bool done = false;
  auto events = w->Events(&done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  std::string id = events[0]["id"];
  EXPECT_EQ(w->headers.at("x-request-id"), id);
  for (const json& e : events) {
    EXPECT_EQ(e["id"], id);
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_EQ(e["model"], "tiny-qwen3");
    EXPECT_TRUE(e["created"].is_number_integer());
    EXPECT_FALSE(e.contains("usage"));
    ASSERT_EQ(e["choices"].size(), 1u);
    EXPECT_TRUE(e["choices"][0].contains("logprobs"));
  }
  EXPECT_EQ(events[0]["choices"][0]["delta"], (json{{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(events.back()["choices"][0]["delta"], json::object());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "stop");
  Joined j = JoinChat(events);
  EXPECT_EQ(j.text[0], ScriptText());
  EXPECT_EQ(j.num_role_chunks[0], 1);
}

TEST_F(OpenAITest, StreamIncludeUsage) {
  auto w = Chat(json{{"messages", UserMessages("hi")},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}},
                     {"max_tokens", 4}});
  bool done = false;
  auto events = w->Events(&done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    ASSERT_TRUE(events[i].contains("usage"));
    EXPECT_TRUE(events[i]["usage"].is_null());
  }
  const json& last = events.back();
  EXPECT_EQ(last["choices"], json::array());
  int prompt = static_cast<int>(engine->submitted()[0].prompt_token_ids.size());
  EXPECT_EQ(last["usage"], (json{{"prompt_tokens", prompt},
                                 {"completion_tokens", 4},
                                 {"total_tokens", prompt + 4},
                                 {"completion_tokens_details", {{"reasoning_tokens", 0}}},
                                 {"prompt_tokens_details", {{"cached_tokens", 0}}}}));
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
}

TEST_F(OpenAITest, UsageCarriesCachedPromptTokens) {
  engine->script.num_cached_tokens = 5;
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"max_tokens", 2}});
  ASSERT_EQ(w->status, 200) << w->body;
  EXPECT_EQ(w->Json()["usage"]["prompt_tokens_details"], (json{{"cached_tokens", 5}}));
}

TEST_F(OpenAITest, StreamOptionsIgnoredWithoutStream) {
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"stream_options", {{"include_usage", true}}}});
  EXPECT_EQ(w->status, 200) << w->body;
  EXPECT_TRUE(w->Json().contains("usage"));
}

// Joined deltas equal the non-streamed text byte for byte, multi-byte characters cut across tokens
// included, for chat and completions; usage equal too.
TEST_F(OpenAITest, StreamEqualsNonStream) {
  engine->script.tokens = tokenizer_->Encode("naïve café — 日本語のテキスト 🎉🇯🇵 ½ end");
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    SCOPED_TRACE(path);
    bool chat = std::string(path) == "/v1/chat/completions";
    json req = chat ? json{{"messages", UserMessages("hi")}} : json{{"prompt", "hi"}};
    req["n"] = 2;
    req["max_tokens"] = 200;  // the whole script (completions stop at 16 without it)
    auto full = Post(path, req.dump());
    ASSERT_EQ(full->status, 200) << full->body;
    req["stream"] = true;
    req["stream_options"] = {{"include_usage", true}};
    auto stream = Post(path, req.dump());
    auto events = stream->Events();
    json usage = events.back()["usage"];
    events.pop_back();
    json fj = full->Json();
    EXPECT_EQ(usage, fj["usage"]);
    std::map<int, std::string> joined;
    for (const json& e : events)
      for (const json& c : e["choices"]) {
        if (chat && c["delta"].contains("content")) joined[c["index"]] += c["delta"]["content"].get<std::string>();
        if (!chat) joined[c["index"]] += c["text"].get<std::string>();
      }
    for (int i = 0; i < 2; ++i) {
      std::string text = chat ? fj["choices"][i]["message"]["content"] : fj["choices"][i]["text"];
      EXPECT_EQ(joined[i], text);
      EXPECT_EQ(text, ScriptText());
    }
  }
}

TEST_F(OpenAITest, NChoicesWithSeeds) {
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"n", 3}, {"seed", 100}, {"max_tokens", 5}});
  json j = w->Json();
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 15);
  auto subs = engine->submitted();
  ASSERT_EQ(subs.size(), 3u);
  std::set<std::string> ids;
  for (const auto& s : subs) {
    ids.insert(s.request_id);
    EXPECT_EQ(s.prompt_token_ids, subs[0].prompt_token_ids);
  }
  std::string id = j["id"];
  EXPECT_EQ(ids, (std::set<std::string>{id + "-0", id + "-1", id + "-2"}));
  std::set<uint64_t> seeds;
  for (const auto& s : subs) seeds.insert(*s.params.seed);
  EXPECT_EQ(seeds, (std::set<uint64_t>{100, 101, 102}));
}

TEST_F(OpenAITest, NChoicesStream) {
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"n", 2}, {"stream", true}});
  bool done = false;
  Joined j = JoinChat(w->Events(&done));
  EXPECT_TRUE(done);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j.text[i], ScriptText());
    EXPECT_EQ(j.finish[i], "stop");
    EXPECT_EQ(j.num_role_chunks[i], 1);
  }
}

TEST_F(OpenAITest, ChatLogprobs) {
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"logprobs", true}, {"top_logprobs", 2},
                     {"max_tokens", 4}});
  json lp = w->Json()["choices"][0]["logprobs"];
  ASSERT_TRUE(lp.contains("content")) << w->body;
  ASSERT_EQ(lp["content"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const json& e = lp["content"][i];
    int32_t id = engine->script.tokens[i];
    std::string raw = tokenizer_->TokenBytes(id);
    json bytes = json::array();
    for (unsigned char ch : raw) bytes.push_back(ch);
    EXPECT_EQ(e["bytes"], bytes);
    EXPECT_FLOAT_EQ(e["logprob"].get<float>(), -0.25f * (i + 1));
    ASSERT_EQ(e["top_logprobs"].size(), 2u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_TRUE(e["top_logprobs"][1].contains("bytes"));
  }
  // Without top_logprobs: an empty list of alternatives.
  w = Chat(json{{"messages", UserMessages("hi")}, {"logprobs", true}, {"max_tokens", 2}});
  EXPECT_EQ(w->Json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"], json::array());
}

TEST_F(OpenAITest, ChatLogprobsLossyTokenText) {
  // A token that is part of a multi-byte character: its text is U+FFFD, its bytes the raw bytes.
  std::string ch;
  for (const char* c : {"ꙮ", "𓀀", "🜁", "𝔘", "ᚠ", "🦩"})
    if (tokenizer_->Encode(c).size() > 1) {
      ch = c;
      break;
    }
  ASSERT_FALSE(ch.empty()) << "no character split across tokens";
  engine->script.tokens = tokenizer_->Encode(ch);
  auto w = Chat(json{{"messages", UserMessages("hi")}, {"logprobs", true}, {"stream", true}});
  std::string joined;
  size_t num_bytes = 0;
  for (const json& e : w->Events()) {
    const json& c = e["choices"][0];
    if (c["delta"].contains("content")) joined += c["delta"]["content"].get<std::string>();
    if (!c["logprobs"].is_null())
      for (const json& t : c["logprobs"]["content"]) {
        num_bytes += t["bytes"].size();
        EXPECT_NE(t["token"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos);
      }
  }
  EXPECT_EQ(joined, ch);
  EXPECT_EQ(num_bytes, ch.size());
}

TEST_F(OpenAITest, CompletionNonStreamShapeEchoLogprobs) {
  auto w = Complete(json{{"prompt", "Say:"}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 3}});
  ASSERT_EQ(w->status, 200) << w->body;
  json j = w->Json();
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["object"], "text_completion");
  const json& c = j["choices"][0];
  std::vector<int32_t> first3(engine->script.tokens.begin(), engine->script.tokens.begin() + 3);
  EXPECT_EQ(c["text"], "Say:" + tokenizer_->Decode(first3, true));
  EXPECT_EQ(c["finish_reason"], "length");
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  ASSERT_EQ(lp["token_logprobs"].size(), 3u);
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  ASSERT_EQ(lp["text_offset"].size(), 3u);
  size_t offset = 4;  // after the echoed prompt
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(lp["text_offset"][i], offset);
    offset += lp["tokens"][i].get<std::string>().size();
    EXPECT_TRUE(lp["top_logprobs"][i].is_object());
    EXPECT_TRUE(lp["top_logprobs"][i].contains(lp["tokens"][i].get<std::string>()));
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], tokenizer_->Encode("Say:").size());
}

TEST_F(OpenAITest, CompletionStreamShape) {
  auto w = Complete(json{{"prompt", "Say:"}, {"stream", true}, {"echo", true}, {"logprobs", 0}});
  bool done = false;
  auto events = w->Events(&done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  std::string text;
  std::vector<size_t> offsets;
  for (const json& e : events) {
    EXPECT_EQ(e["object"], "text_completion");
    const json& c = e["choices"][0];
    text += c["text"].get<std::string>();
    if (!c["logprobs"].is_null())
      for (const json& o : c["logprobs"]["text_offset"]) offsets.push_back(o);
  }
  EXPECT_EQ(events[0]["choices"][0]["text"], "Say:");
  EXPECT_EQ(text, "Say:" + ScriptText());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "stop");
  ASSERT_EQ(offsets.size(), engine->script.tokens.size());
  EXPECT_EQ(offsets[0], 4u);
  auto full = Complete(json{{"prompt", "Say:"}, {"echo", true}, {"logprobs", 0}});
  EXPECT_EQ(full->Json()["choices"][0]["logprobs"]["text_offset"], json(offsets));
}

TEST_F(OpenAITest, CompletionPromptForms) {
  std::vector<int32_t> ids = tokenizer_->Encode("Once upon");
  for (const json& prompt : {json("Once upon"), json::array({"Once upon"}), json(ids),
                             json::array({ids})}) {
    auto w = Complete(json{{"prompt", prompt}, {"max_tokens", 2}, {"echo", true}});
    ASSERT_EQ(w->status, 200) << prompt.dump() << w->body;
    EXPECT_EQ(engine->submitted().back().prompt_token_ids, ids);
    EXPECT_EQ(w->Json()["choices"][0]["text"].get<std::string>().rfind("Once upon", 0), 0u);
  }
}

}  // namespace
}  // namespace tandem::testing
