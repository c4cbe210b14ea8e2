// The tool parameters of a chat request (OpenAI's Chat Completions reference):
//   tools               a list of at most kMaxTools {"type": "function", "function": {"name",
//                       "description", "parameters" (a JSON Schema object), "strict"}}; names
//                       1..64 of [A-Za-z0-9_-], unique (OpenAI's rules);
//   tool_choice         "none" (tools stay in the template, nothing is parsed), "auto" (the default
//                       with tools: the server's tool-call parser reads calls out of the output),
//                       "required" or {"type": "function", "function": {"name": ...}};
//   parallel_tool_calls true (default) or false (at most one call is returned and forced).
// "required" and a named function are enforced: the output is constrained to calls
// (chat_parse/tool_grammar.h: llama3_json or qwen3_coder calls with those parsers, else hermes
// calls, whatever the server's --tool-call-parser) through SamplingParams::structured, so they cannot be combined with
// response_format / guided_*. With "auto", the hermes or qwen3_coder parser and a function with "strict": true,
// the output is constrained too: free text, then calls whose arguments follow the strict
// functions' schemas (unless response_format / guided_* constrain it already). Every problem is a
// 400 naming the parameter.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "chat_parse/tool_calls.h"
#include "engine/sampling_params.h"
#include "frontend/openai_request.h"

namespace tandem::openai {

inline constexpr size_t kMaxTools = 128;  // OpenAI's limit on functions per request

// Reads tools, tool_choice and parallel_tool_calls of `body` into out->tools and
// out->chat_options.tools, and for an enforced choice sets out->params.structured.
// `format`: the server's tool-call parser (kNone: auto parses nothing); `reasoning_parser`: whether
// the server's reasoning parser removes think blocks (if not, the grammar allows none).
std::optional<ApiError> ParseToolParams(const nlohmann::ordered_json& body,
                                        chat_parse::ToolCallFormat format, bool reasoning_parser,
                                        ParsedRequest* out);

}  // namespace tandem::openai
