// One chat choice's output text through the reasoning parser and the tool-call parser
// (chat_parse/), as the OpenAI API returns it:
//   non-streamed: message {"role": "assistant", "content", "reasoning_content", "tool_calls":
//                 [{"id": "call_<hex>", "type": "function", "function": {"name", "arguments"}}]}
//                 (content null when there are calls and no text; reasoning_content only when a
//                 reasoning parser is on, null when empty; tool_calls only when there are calls);
//   streamed:     deltas {"reasoning_content": ...} / {"content": ...}, and per call two deltas,
//                 {"tool_calls": [{"index", "id", "type": "function", "function": {"name",
//                 "arguments": ""}}]} then {"tool_calls": [{"index", "function": {"arguments"}}]}
//                 (vLLM's and OpenAI's delta shape; a call is sent once it is complete).
// finish_reason becomes "tool_calls" when calls were returned (as vLLM does). Reasoning tokens:
// the tokens of every output during which the reasoning was open (its tags included).
// The streamed deltas, accumulated as the openai clients do, equal the non-streamed message.
// A request constrained by response_format / guided_* gets no reasoning parser: its content is
// the grammar's output as it is (openai_handlers.cc).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_parse/reasoning.h"
#include "chat_parse/tool_calls.h"

namespace tandem::openai {

struct ChatOutputOptions {
  chat_parse::ReasoningFormat reasoning = chat_parse::ReasoningFormat::kNone;
  chat_parse::ToolCallFormat tool_calls = chat_parse::ToolCallFormat::kNone;
  bool parallel_tool_calls = true;                 // false: calls after the first are dropped
  const nlohmann::ordered_json* tools = nullptr;   // the request's tools (outlives the output)
};

class ChatOutput {
 public:
  explicit ChatOutput(const ChatOutputOptions& options);

  // One engine output's text and its number of tokens; returns the stream deltas it releases
  // (zero or more objects for a chunk's "delta").
  std::vector<nlohmann::ordered_json> Feed(std::string_view text, int num_tokens);
  // The end of the output: what was held back.
  std::vector<nlohmann::ordered_json> Finish();

  nlohmann::ordered_json Message() const;  // after Finish
  bool has_tool_calls() const { return !calls_.empty(); }
  int reasoning_tokens() const { return reasoning_tokens_; }
  bool reasoning_on() const { return options_.reasoning != chat_parse::ReasoningFormat::kNone; }
  // Nothing is parsed: the text is the content as the engine wrote it.
  bool passthrough() const {
    return !reasoning_on() && options_.tool_calls == chat_parse::ToolCallFormat::kNone;
  }

 private:
  std::vector<nlohmann::ordered_json> Deltas(const chat_parse::ReasoningDelta& r, bool finish);

  ChatOutputOptions options_;
  chat_parse::ReasoningParser reasoning_;
  chat_parse::ToolCallParser tool_parser_;
  std::string reasoning_text_, content_;
  nlohmann::ordered_json calls_ = nlohmann::ordered_json::array();
  int reasoning_tokens_ = 0;
};

}  // namespace tandem::openai
