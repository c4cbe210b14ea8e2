// OpenAI API requests: parse and validate the JSON bodies of /v1/chat/completions and
// /v1/completions (OpenAI's and vLLM's parameter set), then render and tokenize the prompt.
//
// Every failure is an ApiError: an HTTP status and the fields of OpenAI's error body
// {"error":{"message","type","param","code"}}. Codes used: "invalid_type" (a field of the wrong
// JSON type), "invalid_value" (out of range), "model_not_found" (404), "context_length_exceeded"
// (prompt or prompt + max_tokens beyond max_model_len, naming the numbers, as vLLM does).
//
// Accepted (others are ignored, as vLLM ignores unknown fields):
//   common: model, stream, stream_options.include_usage (ignored without stream), n (1..max_n),
//     stop (string or list of strings), stop_token_ids (vLLM), max_tokens, temperature [0,2],
//     top_p (0,1], top_k (-1 or >= 0), min_p [0,1], seed (64-bit signed integer; choice i of n uses seed + i),
//     frequency_penalty and presence_penalty [-2,2], repetition_penalty (> 0), ignore_eos,
//     skip_special_tokens, user (ignored). Ranges are checked on the value as given and as the
//     32-bit float the engine uses (1e308 -> inf and top_p 5e-324 -> 0.0f are 400s).
//   chat: messages (roles system, developer (rendered as system), user, assistant, tool; content a
//     string, null or absent (assistant only; rendered as "") or a list of {"type":"text","text"}
//     parts joined with "\n"),
//     max_completion_tokens (wins over max_tokens), logprobs (bool), top_logprobs (0..20, needs
//     logprobs), tools, tool_choice and parallel_tool_calls (frontend/tool_params.h),
//     chat_template_kwargs (object, passed as extra template variables, e.g. enable_thinking),
//     add_generation_prompt (vLLM, default true). Assistant messages may carry tool_calls (a list of
//     {id, type, function: {name, arguments}}) and tool messages tool_call_id (a string); both
//     reach the template as given, as transformers' apply_chat_template passes them.
//   Accepted only in their no-op form (else 400 "... is not supported", param set): logit_bias
//     ({} or null), response_format ({"type":"text"}), min_tokens (0), include_stop_str_in_output
//     (false).
//   completions: prompt (a string, a list of one string, a list of token ids, or a list of one such
//     list), echo, logprobs (integer 0..20).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/template.h"
#include "chat_parse/reasoning.h"
#include "chat_parse/tool_calls.h"
#include "engine/sampling_params.h"
#include "model/generation_config.h"
#include "tokenizer/tokenizer.h"

namespace tandem::openai {

// max_tokens of a /v1/completions request that gives none (OpenAI's API reference and vLLM: 16).
inline constexpr int kDefaultCompletionMaxTokens = 16;

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
  std::string Body() const;  // the JSON error body
};

enum class Endpoint { kChatCompletions, kCompletions };

struct ParseOptions {
  std::string served_model_name;  // "model" must equal it when present (else 404)
  int max_n = 16;
  chat_parse::ToolCallFormat tool_call_format = chat_parse::ToolCallFormat::kNone;  // the server's
  // The server's reasoning parser takes think blocks out of the output (false: --reasoning-parser
  // none, so an enforced tool call may not start with one: it would stay in front of the call).
  bool reasoning_parser = true;
  // What a request that leaves temperature, top_p, top_k, min_p or repetition_penalty out gets
  // (the model's generation_config.json, vLLM's --generation-config auto); unset: OpenAI's defaults.
  SamplingDefaults sampling_defaults;
};

// What a chat request asks of tool calls (frontend/tool_params.h).
struct ToolRequest {
  enum class Choice { kNone, kAuto, kRequired, kNamed };
  Choice choice = Choice::kNone;  // kNone too when the request has no tools
  std::string name;               // kNamed: the function
  bool parallel = true;           // parallel_tool_calls
  // The parser that reads calls out of this request's output (kNone: none is read).
  chat_parse::ToolCallFormat format = chat_parse::ToolCallFormat::kNone;
  bool constrained = false;  // params.structured is the tool-call grammar (chat_parse/tool_grammar.h)
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  int n = 1;
  // Absent: chat up to the context (max_model_len - prompt length); completions
  // kDefaultCompletionMaxTokens (16, as OpenAI and vLLM), or less when the context ends sooner.
  std::optional<int> max_tokens;
  std::string max_tokens_param = "max_tokens";  // the field it came from (for errors)
  // The model's max_new_tokens (generation_config.json): Tokenize caps params.max_tokens at it.
  std::optional<int> max_tokens_cap;
  SamplingParams params;          // max_tokens set by Tokenize(); logprobs -1 when not asked
  // Chat only.
  nlohmann::ordered_json messages;
  ChatOptions chat_options;
  ToolRequest tools;
  // Completions only.
  std::string prompt_text;                       // when the prompt was text
  std::optional<std::vector<int32_t>> prompt_ids;  // when the prompt was token ids
  bool echo = false;
};

// The deepest nesting of arrays and objects a request body may have (a tool's parameters schema,
// a message's content parts and a json_schema all sit well inside it): deeper bodies are a 400
// before anything recurses over them (the chat template's value conversion would overflow the
// HTTP thread's stack on a 60 KB body of 30,000 nested arrays).
inline constexpr int kMaxRequestNesting = 512;

// Parses and validates a request body for `endpoint`. On error returns it and leaves *out partial.
std::optional<ApiError> ParseRequest(Endpoint endpoint, const std::string& body,
                                     const ParseOptions& options, ParsedRequest* out);

// Renders (chat) and tokenizes the prompt, checks it against the context and fixes
// params.max_tokens. Chat prompts are tokenized with special tokens parsed except inside message
// text (ChatRenderer's literal ranges), so user text "<|im_end|>" stays plain text; completion
// prompts without parsing special tokens. For completions with echo, *echo_text receives the
// prompt text (decoded from the ids for an ids prompt). `renderer` may be null (chat -> 400).
// With max_token_bytes > 0 (MaxTokenBytes of `tokenizer`), a text prompt that certainly has at
// least max_model_len tokens is refused before it is tokenized (tokenizing megabytes takes seconds
// on the HTTP thread): its bytes other than ASCII whitespace and non-ASCII bytes, divided by the
// longest token, already reach max_model_len.
std::optional<ApiError> TokenizePrompt(ParsedRequest* request, const Tokenizer& tokenizer,
                                       const ChatRenderer* renderer, int max_model_len,
                                       std::vector<int32_t>* prompt_ids, std::string* echo_text,
                                       int max_token_bytes = 0);

// The byte length of the tokenizer's longest token (special tokens by their text). Walks the
// vocabulary once (milliseconds for 150k tokens): call it at startup.
int MaxTokenBytes(const Tokenizer& tokenizer);

}  // namespace tandem::openai
