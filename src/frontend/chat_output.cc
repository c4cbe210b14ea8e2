#include "frontend/chat_output.h"

#include <algorithm>

#include "frontend/openai_response.h"

namespace tandem::openai {

using chat_parse::ReasoningDelta;
using chat_parse::ToolCallDelta;

ChatOutput::ChatOutput(const ChatOutputOptions& options)
    : options_(options), reasoning_(options.reasoning), tool_parser_(options.tool_calls, options.tools) {}

std::vector<ojson> ChatOutput::Feed(std::string_view text, int num_tokens) {
  const bool before = reasoning_.InReasoning();
  ReasoningDelta r = reasoning_.Feed(text);
  const bool after = reasoning_.InReasoning();
  // Reasoning tokens are those between the tags (as vLLM counts them): a piece that opens or
  // closes the block counts all but one of its tokens (the tag's).
  if (before && after) reasoning_tokens_ += num_tokens;
  else if (before != after) reasoning_tokens_ += std::max(num_tokens - 1, 0);
  return Deltas(r, false);
}

std::vector<ojson> ChatOutput::Finish() { return Deltas(reasoning_.Finish(), true); }

std::vector<ojson> ChatOutput::Deltas(const ReasoningDelta& r, bool finish) {
  std::vector<ojson> out;
  ToolCallDelta t = tool_parser_.Feed(r.content);
  if (finish) {
    ToolCallDelta rest = tool_parser_.Finish();
    t.content += rest.content;
    for (auto& c : rest.calls) t.calls.push_back(std::move(c));
  }
  ojson text = ojson::object();
  if (!r.reasoning.empty()) {
    reasoning_text_ += r.reasoning;
    text["reasoning_content"] = r.reasoning;
  }
  if (!t.content.empty()) {
    content_ += t.content;
    text["content"] = t.content;
  }
  if (!text.empty()) out.push_back(std::move(text));
  for (chat_parse::ToolCall& c : t.calls) {
    if (!options_.parallel_tool_calls && !calls_.empty()) break;
    const size_t index = calls_.size();
    const std::string id = NewResponseId("call_").substr(0, 29);  // call_ and 24 hex digits
    calls_.push_back(ojson{{"id", id}, {"type", "function"},
                           {"function", ojson{{"name", c.name}, {"arguments", c.arguments}}}});
    out.push_back(ojson{{"tool_calls", ojson::array({ojson{
        {"index", index}, {"id", id}, {"type", "function"},
        {"function", ojson{{"name", c.name}, {"arguments", ""}}}}})}});
    out.push_back(ojson{{"tool_calls", ojson::array({ojson{
        {"index", index}, {"function", ojson{{"arguments", c.arguments}}}}})}});
  }
  return out;
}

ojson ChatOutput::Message() const {
  ojson m{{"role", "assistant"}};
  m["content"] = content_.empty() && !calls_.empty() ? ojson(nullptr) : ojson(content_);
  if (reasoning_on()) m["reasoning_content"] = reasoning_text_.empty() ? ojson(nullptr) : ojson(reasoning_text_);
  if (!calls_.empty()) m["tool_calls"] = calls_;
  return m;
}

}  // namespace tandem::openai
