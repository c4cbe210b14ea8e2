// OpenAI API responses: the JSON bodies of non-streamed responses and of SSE chunks, logprobs in
// the chat and the completions formats, usage. Shapes follow the OpenAI API reference:
//   chat:        {"id":"chatcmpl-<hex>","object":"chat.completion","created","model",
//                 "choices":[{"index","message":{"role":"assistant","content"},"logprobs",
//                 "finish_reason"}],"usage":{"prompt_tokens","completion_tokens","total_tokens",
//                 "prompt_tokens_details":{"cached_tokens"}}}
//   chat chunk:  {"id","object":"chat.completion.chunk","created","model",
//                 "choices":[{"index","delta":{...},"logprobs","finish_reason"}]}
//                 (+ "usage":null on every chunk when stream_options.include_usage)
//   completions: {"id":"cmpl-<hex>","object":"text_completion","created","model",
//                 "choices":[{"index","text","logprobs","finish_reason"}],"usage"}
//   chat logprobs: {"content":[{"token","logprob","bytes":[...],"top_logprobs":[{"token","logprob","bytes"}]}]}
//   completions logprobs: {"tokens":[...],"token_logprobs":[...],"top_logprobs":[{tok: lp}],
//                          "text_offset":[...]} (top_logprobs holds the top-k plus the chosen token,
//                          as vLLM does)
// Token text is the token's raw bytes decoded as UTF-8 lossily (ill-formed bytes -> U+FFFD);
// "bytes" are the raw byte values. A non-finite logprob is written as -9999.0 (OpenAI's value).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace tandem::openai {

using ojson = nlohmann::ordered_json;

// "<prefix><32 lower-case hex digits>", e.g. NewResponseId("chatcmpl-").
std::string NewResponseId(std::string_view prefix);
int64_t UnixSeconds();

// Ill-formed UTF-8 replaced by U+FFFD, one per maximal subpart.
std::string Utf8Lossy(std::string_view bytes);
// Compact JSON; invalid UTF-8 in strings replaced (never throws).
std::string Dump(const ojson& j);
// "data: <json>\n\n" and the terminator "data: [DONE]\n\n".
std::string SseData(const ojson& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

const char* FinishReasonString(FinishReason reason);  // "stop" / "length"; others -> "stop"
// A chat choice's finish_reason: "tool_calls" when calls were parsed out of an output that ended
// on its own; an output cut off by max_tokens or the context stays "length" (its last call may be
// cut off too), as OpenAI's does.
const char* ChatFinishReason(FinishReason reason, bool tool_calls);

// Chat logprobs: the "content" array entries for these tokens.
ojson ChatLogprobEntries(const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer);

// Completions logprobs, built up output by output. `text_offset` of a token is where its text
// starts in the choice's text (echoed prompt included).
class CompletionLogprobs {
 public:
  explicit CompletionLogprobs(size_t start_offset = 0) : offset_(start_offset) {}
  void Append(const std::vector<TokenLogprob>& logprobs, const Tokenizer& tokenizer);
  ojson ToJson() const;
  size_t offset() const { return offset_; }  // where the next token's text starts

 private:
  size_t offset_;
  ojson tokens_ = ojson::array(), token_logprobs_ = ojson::array(),
        top_logprobs_ = ojson::array(), text_offset_ = ojson::array();
};

// {"prompt_tokens","completion_tokens","total_tokens","prompt_tokens_details":{"cached_tokens"}}
// as OpenAI's usage object; cached_tokens: prompt tokens served from the prefix cache (the most
// of any choice: every choice reads the same prompt).
// With reasoning_tokens >= 0 (a reasoning parser is on) also
// "completion_tokens_details":{"reasoning_tokens"}.
ojson UsageJson(int prompt_tokens, int completion_tokens, int cached_tokens, int reasoning_tokens = -1);

// What one choice produced, in full (non-streamed responses).
struct ChoiceResult {
  std::string text;  // echoed prompt included for completions with echo
  FinishReason finish_reason = FinishReason::kNone;
  std::vector<TokenLogprob> logprobs;
  int num_output_tokens = 0;
  ojson message;            // chat: the parsed message (frontend/chat_output.h); null: text as content
  bool tool_calls = false;  // chat: calls were returned (finish_reason "tool_calls")
};

struct ResponseHeader {
  std::string id;
  int64_t created = 0;
  std::string model;
};

// want_logprobs: the request asked for logprobs (else "logprobs": null).
ojson ChatCompletionJson(const ResponseHeader& h, const std::vector<ChoiceResult>& choices,
                         bool want_logprobs, const Tokenizer& tokenizer, const ojson& usage);
ojson CompletionJson(const ResponseHeader& h, const std::vector<ChoiceResult>& choices,
                     bool want_logprobs, size_t echo_len, const Tokenizer& tokenizer,
                     const ojson& usage);

// One streamed chunk for one choice. `delta` e.g. {"role":"assistant","content":""},
// {"content":"..."} or {}; logprobs and finish_reason may be null. include_usage adds "usage":null.
ojson ChatChunkJson(const ResponseHeader& h, int index, ojson delta, ojson logprobs,
                    ojson finish_reason, bool include_usage);
ojson CompletionChunkJson(const ResponseHeader& h, int index, std::string text, ojson logprobs,
                          ojson finish_reason, bool include_usage);
// The final usage chunk: "choices": [] and the usage.
ojson UsageChunkJson(const ResponseHeader& h, bool chat, const ojson& usage);

}  // namespace tandem::openai
