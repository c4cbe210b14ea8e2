// The grammar of tool calls (tool_calls.h) for the grammar engine; hermes calls by default,
//   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>   (calls separated by "\n")
// where NAME is one of the given functions and ARGS is JSON that follows that function's
// `parameters` schema (grammar/json_schema.h; absent parameters: any object), optionally after a
// think block "<think>...</think>" (any text without "</think>") and up to 4 spaces or newlines,
// which the reasoning parser then removes.
//   forced (tool_choice "required" or a named function): nothing but the calls, at least one;
//   allow_text (tool_choice "auto" with strict functions): any text without "<tool_call>", then
//     zero or more calls, and nothing after them.
// With format llama3_json (forced only) the calls are Llama 3.1's JSON instead,
//   {"name": "NAME", "parameters": ARGS}   (calls separated by "; ");
// with mistral, Mistral's marker and JSON array (the form its v3 chat template writes),
//   [TOOL_CALLS][{"name": "NAME", "arguments": ARGS}, ...]   (calls separated by ", ");
// with qwen3_coder, Qwen3-Coder's XML-like calls,
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// with the schema's properties in its order (the required ones always, the others optionally), a
// string's VALUE raw text without "</parameter>" (or one of its enum values; other string keywords
// are InvalidArgument), any other VALUE JSON that follows the property's schema.
// The result is GBNF text for StructuredKind::kGrammar (grammar.h), so it travels to any worker
// like a guided_grammar.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_parse/tool_calls.h"
#include "common/status.h"

namespace tandem::chat_parse {

struct ToolCallGrammarOptions {
  bool allow_think = true;  // the output may start with a think block
  bool parallel = true;     // more than one call (parallel_tool_calls)
  bool allow_text = false;  // free text first, and the calls optional (auto; hermes only)
  ToolCallFormat format = ToolCallFormat::kHermes;  // kHermes, kLlama3Json, kMistral or kQwen3Coder
};

// The format a forced call is written in for a server whose parser is `parser`: llama3_json,
// mistral and qwen3_coder as themselves, else hermes (pythonic calls have no grammar yet).
ToolCallFormat ForcedCallFormat(ToolCallFormat parser);

// `functions`: the "function" objects ({name, parameters, ...}) a call may name, at least one.
// InvalidArgument naming the function when its parameters are not a schema the grammar engine
// enforces (the keyword, as json_schema.h says it), or for a format other than those above.
Result<std::string> ToolCallGbnf(const std::vector<nlohmann::ordered_json>& functions,
                                       const ToolCallGrammarOptions& options);

}  // namespace tandem::chat_parse
