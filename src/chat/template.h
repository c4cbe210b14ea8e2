// ChatTemplate: renders Hugging Face chat templates (the `chat_template` of tokenizer_config.json)
// byte-identically to Python's jinja2 as transformers sets it up:
//   ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), extension loopcontrols,
//   filter tojson (non-ASCII kept), globals raise_exception(msg) and strftime_now(fmt),
//   Python str methods on strings (startswith, endswith, split, rstrip, lstrip, strip, ...).
// It implements the Jinja subset real templates use (Qwen3, Qwen2.5, Llama 3.x, Mistral):
//   tags: if/elif/else, for (loop.*, for-else, `for x in xs if cond`, tuple unpacking), set (incl.
//     namespace attributes and block set), macro, call, with, filter, break/continue, raw,
//     generation (transformers' tag; renders its body);
//   expressions: Python literals, arithmetic, ~, comparisons, and/or/not, in, `is` tests,
//     conditional expressions, subscripts and slices, filters, calls, Python str/dict methods;
//   globals: range, namespace, dict, raise_exception, strftime_now (local time).
// Not supported (an InvalidArgument at Parse naming it and the line): include/extends/block/import,
// recursive loops, *args/**kwargs in calls, filters and tests outside the implemented set; at
// Render: printf-style `%` formatting and str methods outside the implemented set.
// Case mapping (lower/upper/title) covers ASCII, Latin-1, Greek and Cyrillic letters only.
//
// Key order: dicts keep the order of the JSON given. nlohmann::json sorts object keys, so pass
// nlohmann::ordered_json (both convert implicitly) to get Python's insertion order, which matters
// for `tojson` output (e.g. tool definitions in the system prompt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem {

// Bounds on one render: past any of them the render is an InvalidArgument naming the bound (a
// template is a program from the request or the model directory; jinja2 would run it until memory
// or time ran out). The defaults are the production limits; every render that passes no limits
// uses them. Smaller ones make each render of a hostile template cheaper with the same errors
// (the chat_template fuzzer renders with 1/16 of them: under ASan a 16 MiB string costs seconds).
struct ChatTemplateLimits {
  // The largest string value, or text being built for one (chat/value.h kMaxTemplateStringBytes).
  size_t max_string_bytes = size_t{16} << 20;
  // Text one render may emit, counted at every level (chat/eval.h kMaxTemplateOutputBytes).
  size_t max_output_bytes = size_t{16} << 20;
  // Characters of a string iterated, items of a list built by `*` (kMaxIteratedStringBytes).
  size_t max_iterated_items = size_t{1} << 20;
  // Statements executed plus loop iterations (chat/eval.h kMaxTemplateSteps).
  int64_t max_steps = int64_t{2} << 20;
};

class ChatTemplate {
 public:
  // Parses a template. InvalidArgument naming the construct and line (e.g. "unsupported tag
  // 'macro' at line 3") when it uses something the renderer does not implement or is malformed.
  static Result<ChatTemplate> Parse(const std::string& source);

  // Renders with `context` as the template's variables (e.g. messages, tools,
  // add_generation_prompt, enable_thinking, bos_token, eos_token). Errors: InvalidArgument with
  // the line for a runtime error, and the message of raise_exception(). `limits`: see
  // ChatTemplateLimits (the production limits unless given).
  Result<std::string> Render(const nlohmann::ordered_json& context,
                             const ChatTemplateLimits& limits = {}) const;

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
  nlohmann::ordered_json tools;         // null or a list of tool definitions (OpenAI format)
  nlohmann::ordered_json extra_kwargs;  // chat_template_kwargs, e.g. {"enable_thinking": false}
};

// Loads the chat template (and bos/eos token strings) from <model_dir>/tokenizer_config.json
// (or a chat_template.jinja file beside it).
class ChatRenderer {
 public:
  // The template: <model_dir>/chat_template.jinja when present (as transformers prefers it), else
  // tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"} of which
  // "default" is used). bos_token/eos_token: a string or {"content": ...}. Special tokens: the
  // "special": true entries of added_tokens_decoder. NotFound without a template;
  // InvalidArgument when the template does not parse.
  static Result<ChatRenderer> Load(const std::string& model_dir);

  // messages: a JSON list of {"role", "content", ...}. The template sees, as transformers passes
  // them: messages, tools (null when none), documents (null), add_generation_prompt, bos_token,
  // eos_token (null when the config has none), then every key of extra_kwargs (which may override).
  //
  // Literal ranges: before rendering, each occurrence of a special token's text inside any string
  // of `messages` or `tools` is replaced by a placeholder of private-use code points,
  // U+E000, the occurrence's index as decimal digits U+E010..U+E019, U+E001, which templates pass
  // through unchanged (a U+E000 already in the input is escaped the same way). After rendering,
  // each placeholder is replaced by its original text and, for special tokens, its byte range in
  // the output is recorded in literal_ranges (sorted, non-overlapping). Templates that measure or
  // slice message text see the placeholder instead of the token text.
  Result<RenderedChat> Render(const nlohmann::ordered_json& messages, const ChatOptions& options) const;

  // The template's Jinja text (e.g. to recognize a model family's tags in it).
  const std::string& source() const { return source_; }

 private:
  ChatTemplate template_;
  std::string source_;
  std::optional<std::string> bos_token_, eos_token_;  // absent: not passed to the template
  std::vector<std::string> special_token_texts_;
  ChatRenderer(ChatTemplate t) : template_(std::move(t)) {}
};

}  // namespace tandem
