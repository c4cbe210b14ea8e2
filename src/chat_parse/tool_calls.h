// Tool-call parsers: the function calls a chat model writes into its answer, as the OpenAI API
// returns them (message.tool_calls: [{id, type: "function", function: {name, arguments}}], where
// arguments is JSON text). Names follow vLLM's --tool-call-parser (docs.vllm.ai, "Tool Calling");
// the formats are the models' own, as their chat templates and model cards write them:
//   hermes:      <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>, one block per call
//                (Hermes 2 Pro, Qwen2.5 and Qwen3: their templates' tool-call instructions).
//   qwen3_coder: <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n</function>\n
//                </tool_call> (Qwen3-Coder's template); a value is typed by the tool's schema
//                (string properties stay text, others are read as JSON, else kept as text).
//   llama3_json: the whole answer is {"name": "f", "parameters": {...}} (several separated by ";"),
//                optionally after <|python_tag|> (Llama 3.1/3.2 model cards, JSON tool calling).
//   mistral:     [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...] (Mistral v3 tokenizer) or
//                [TOOL_CALLS]f[ARGS]{...} (v11 tokenizer); [TOOL_CALLS] is a special token, so a
//                server must not skip special tokens for it to appear in the text.
//   pythonic:    the whole answer is a Python list of calls [f(a=1), g(b="x")] with literal
//                arguments (Llama 3.2 / Llama 4 pythonic format), optionally in
//                <|python_start|>...<|python_end|>.
// Text outside the calls is content. A call that does not parse (bad JSON, no name) is returned as
// content, as written, never as an error. Whitespace between calls and around them is dropped.
// The streaming parser gives a call only once it is complete (its end tag, or the end of the output
// for the formats that run to it), so a stream never announces a call that later fails; fed in any
// pieces and finished, it yields exactly what ParseToolCalls gives for the whole text.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::chat_parse {

enum class ToolCallFormat { kNone, kHermes, kQwen3Coder, kLlama3Json, kMistral, kPythonic };

// "none", "hermes", "qwen3_coder", "llama3_json", "mistral", "pythonic"; and back.
std::optional<ToolCallFormat> ParseToolCallFormat(std::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);
inline constexpr std::string_view kToolCallFormatNames =
    "hermes, qwen3_coder, llama3_json, mistral, pythonic, none";

// The parser a chat template's tool-call instructions call for: qwen3_coder ("<function=" inside
// "<tool_call>"), hermes ("<tool_call>"), mistral ("[TOOL_CALLS]"), llama3_json
// ("<|python_tag|>" or Llama 3's "parameters" JSON instructions), else none.
ToolCallFormat ToolCallFormatForTemplate(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // compact JSON text ("{}" when the model gave none)
  bool operator==(const ToolCall&) const = default;
};

struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> calls;  // completed calls, in order
};

class ToolCallParser {
 public:
  // `tools`: the request's tools array (OpenAI's [{type, function: {name, parameters}}]), read by
  // qwen3_coder for parameter types; may be null. It must outlive the parser.
  ToolCallParser(ToolCallFormat format, const nlohmann::ordered_json* tools);

  ToolCallDelta Feed(std::string_view text);
  ToolCallDelta Finish();
  int num_calls() const { return num_calls_; }

  struct Spec;  // a format's markers (tool_call_stream.cc)

 private:
  void Run(ToolCallDelta& out, bool finish);
  void EmitContent(ToolCallDelta& out, std::string_view text);
  void Resolve(ToolCallDelta& out);

  ToolCallFormat format_;
  const nlohmann::ordered_json* tools_;
  const Spec* spec_;
  std::string buf_;           // text not yet decided
  bool at_start_ = true;      // nothing but whitespace seen (for formats anchored at the start)
  bool in_call_ = false;
  std::string marker_;        // the start marker of the open call
  std::string region_;        // the open call's text after its marker
  std::string region_ws_;     // whitespace dropped before the open call (restored if it fails)
  bool region_closed_ = false;  // the open call met its end marker
  std::string pending_ws_;    // content whitespace held until more content follows
  bool skip_leading_ws_ = false;  // after a call: whitespace is a separator
  bool emitted_ = false;          // some content other than whitespace went out
  std::string separator_;         // the whitespace before the first call of a run of calls
  std::string after_ws_;          // the whitespace skipped after them
  int num_calls_ = 0;
};

// The whole output at once (= Feed(text) + Finish()). Content is empty when there is none.
ToolCallDelta ParseToolCalls(ToolCallFormat format, std::string_view text,
                             const nlohmann::ordered_json* tools);

// Format internals (tool_call_formats.cc, pythonic.cc): a call region's text (after its start
// marker, without the end marker) to calls; nullopt when it does not parse.
std::optional<std::vector<ToolCall>> ParseRegion(ToolCallFormat format, std::string_view region,
                                                 const nlohmann::ordered_json* tools);
std::optional<std::vector<ToolCall>> ParsePythonicCalls(std::string_view text);
// The end of the JSON object or array that starts at s[pos] ('{' or '['): one past its closing
// bracket, or npos when it is not closed within s. Strings and escapes are skipped.
size_t JsonContainerEnd(std::string_view s, size_t pos);
// Compact JSON text, invalid UTF-8 replaced (never throws).
std::string CompactJson(const nlohmann::ordered_json& j);

}  // namespace tandem::chat_parse
