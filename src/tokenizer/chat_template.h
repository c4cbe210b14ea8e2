// ChatTemplate: renders Hugging Face chat templates (the `chat_template` of tokenizer_config.json)
// byte-identically to Python's jinja2 as transformers sets it up:
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), extension loopcontrols,
//   filter tojson (non-ASCII kept), globals raise_exception(msg) and strftime_now(fmt),
//   Python str methods on strings (startswith, endswith, split, rstrip, lstrip, strip, ...).
// It implements the Jinja subset real templates use (Qwen3, Qwen2.5, Llama 3.x, Mistral).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem {

class ChatTemplate {
 public:
  // Parses a template. InvalidArgument naming the construct and line (e.g. "unsupported tag
  // 'macro' at line 3") when it uses something the renderer does not implement or is malformed.
  static Result<ChatTemplate> Parse(const std::string& source);

  // Renders with `context` as the template's variables (e.g. messages, tools,
  // add_generation_prompt, enable_thinking, bos_token, eos_token). Errors: InvalidArgument with
  // the line for a runtime error, and the message of raise_exception().
  Result<std::string> Render(const nlohmann::json& context) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// A rendered chat prompt: the text, and the byte ranges that came from message content, to be
// tokenized as ordinary text even though the rest is tokenized with special tokens parsed.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> literal_ranges;  // [begin, end), sorted
};

struct ChatOptions {
  bool add_generation_prompt = true;
  nlohmann::json tools;        // null or a list of tool definitions (OpenAI format)
  nlohmann::json extra_kwargs;  // chat_template_kwargs, e.g. {"enable_thinking": false}
};

// Loads the chat template (and bos/eos token strings) from <model_dir>/tokenizer_config.json
// (or a chat_template.jinja file beside it).
class ChatRenderer {
 public:
  static Result<ChatRenderer> Load(const std::string& model_dir);
  // messages: a JSON list of {"role", "content", ...}. Special-token text inside message content
  // is marked literal in the result.
  Result<RenderedChat> Render(const nlohmann::json& messages, const ChatOptions& options) const;

 private:
  ChatTemplate template_;
  std::string bos_token_, eos_token_;
  std::vector<std::string> special_token_texts_;
  ChatRenderer(ChatTemplate t) : template_(std::move(t)) {}
};

}  // namespace tandem
