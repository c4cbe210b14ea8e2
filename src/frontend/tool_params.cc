#include "frontend/tool_params.h"

#include <set>

#include <fmt/format.h>

#include "chat_parse/tool_grammar.h"
#include "frontend/errors.h"
#include "grammar/json_schema.h"

namespace tandem::openai {

namespace {

using ojson = nlohmann::ordered_json;
using chat_parse::ToolCallFormat;

ApiError Invalid(std::string param, std::string message, const char* code = "invalid_value") {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = code;
  return e;
}

const ojson* Present(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The structure JSON Schema (draft 2020-12, the validation and applicator vocabularies) gives the
// keywords a tool's parameters use most: `type` one of its seven type names (or a list of them),
// `properties` / `$defs` / `definitions` objects of schemas, `items` a schema (or draft-07's list
// of them), `additionalProperties` a schema, `anyOf` / `oneOf` / `allOf` non-empty lists of
// schemas, `required` a list of strings, `enum` a list. Other keywords pass unchecked (what the
// grammar engine cannot enforce is refused later, only where a call is enforced). A boolean is a
// schema too, below the top.
std::optional<ApiError> CheckSchemaShape(const std::string& param, const ojson& schema, int depth = 0) {
  if (schema.is_boolean() && depth > 0) return std::nullopt;
  if (!schema.is_object())
    return Invalid(param, fmt::format("'{}' must be a JSON Schema object, got {}.", param, schema.type_name()));
  if (depth > grammar::kMaxJsonNesting)
    return Invalid(param, fmt::format("'{}' is nested deeper than {} levels.", param, grammar::kMaxJsonNesting));
  static const std::set<std::string> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};
  auto known = [](const ojson& t) { return t.is_string() && kTypes.count(t.get_ref<const std::string&>()) > 0; };
  if (const ojson* type = Present(schema, "type")) {
    bool ok = known(*type);
    if (type->is_array()) {
      ok = !type->empty();
      for (const ojson& t : *type) ok = ok && known(t);
    }
    if (!ok)
      return Invalid(param + ".type", fmt::format("'{}.type' must be one of JSON Schema's types ({}) or a list of them.",
                                                  param, "object, array, string, number, integer, boolean, null"));
  }
  for (const char* key : {"properties", "$defs", "definitions"}) {
    const ojson* p = Present(schema, key);
    if (!p) continue;
    if (!p->is_object()) return Invalid(param + "." + key, fmt::format("'{}.{}' must be an object of schemas.", param, key));
    for (auto it = p->begin(); it != p->end(); ++it)
      if (auto e = CheckSchemaShape(param + "." + key + "." + it.key(), it.value(), depth + 1)) return e;
  }
  if (const ojson* p = Present(schema, "items"); p && p->is_array()) {  // draft-07's tuple form
    for (size_t i = 0; i < p->size(); ++i)
      if (auto e = CheckSchemaShape(fmt::format("{}.items[{}]", param, i), (*p)[i], depth + 1)) return e;
  } else if (p) {
    if (auto e = CheckSchemaShape(param + ".items", *p, depth + 1)) return e;
  }
  if (const ojson* p = Present(schema, "additionalProperties"))
    if (auto e = CheckSchemaShape(param + ".additionalProperties", *p, depth + 1)) return e;
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    const ojson* p = Present(schema, key);
    if (!p) continue;
    if (!p->is_array() || p->empty())
      return Invalid(param + "." + key, fmt::format("'{}.{}' must be a non-empty list of schemas.", param, key));
    for (size_t i = 0; i < p->size(); ++i)
      if (auto e = CheckSchemaShape(fmt::format("{}.{}[{}]", param, key, i), (*p)[i], depth + 1)) return e;
  }
  if (const ojson* r = Present(schema, "required")) {
    bool ok = r->is_array();
    if (ok)
      for (const ojson& n : *r) ok = ok && n.is_string();
    if (!ok) return Invalid(param + ".required", fmt::format("'{}.required' must be a list of strings.", param));
  }
  if (const ojson* e = Present(schema, "enum"); e && !e->is_array())
    return Invalid(param + ".enum", fmt::format("'{}.enum' must be a list.", param));
  return std::nullopt;
}

std::optional<ApiError> CheckTools(const ojson& tools, std::vector<ojson>* functions) {
  if (tools.size() > kMaxTools)
    return Invalid("tools", fmt::format("'tools' has {} entries; at most {} are supported.", tools.size(), kMaxTools));
  std::set<std::string> names;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = fmt::format("tools[{}]", i);
    const ojson& t = tools[i];
    if (!t.is_object()) return Invalid(where, fmt::format("'{}' must be an object.", where), "invalid_type");
    const ojson* type = Present(t, "type");
    if (!type || !type->is_string() || type->get_ref<const std::string&>() != "function")
      return Invalid(where + ".type", fmt::format("'{}.type' must be \"function\".", where));
    const ojson* f = Present(t, "function");
    if (!f || !f->is_object())
      return Invalid(where + ".function", fmt::format("'{}.function' must be an object.", where));
    const ojson* name = Present(*f, "name");
    if (!name) return Invalid(where + ".function.name", fmt::format("'{}.function.name' is required.", where));
    if (!name->is_string() || !ValidName(name->get<std::string>()))
      return Invalid(where + ".function.name",
                     fmt::format("'{}.function.name' must be 1 to 64 letters, digits, '_' or '-'.", where));
    if (!names.insert(name->get<std::string>()).second)
      return Invalid(where + ".function.name",
                     fmt::format("Function name '{}' is given twice in 'tools'.", name->get<std::string>()));
    if (const ojson* d = Present(*f, "description"); d && !d->is_string())
      return Invalid(where + ".function.description", fmt::format("'{}.function.description' must be a string.", where),
                     "invalid_type");
    if (const ojson* s = Present(*f, "strict"); s && !s->is_boolean())
      return Invalid(where + ".function.strict", fmt::format("'{}.function.strict' must be a boolean.", where),
                     "invalid_type");
    if (const ojson* p = Present(*f, "parameters")) {
      if (auto e = CheckSchemaShape(where + ".function.parameters", *p)) return e;
    }
    functions->push_back(*f);
  }
  return std::nullopt;
}

bool IsStrict(const ojson& function) {
  const ojson* s = Present(function, "strict");
  return s && s->is_boolean() && s->get<bool>();
}

// tool_choice auto with hermes or qwen3_coder parsing and a strict function: free text or calls, every call's
// arguments following its schema (a function that is not strict: any object).
std::optional<ApiError> StrictInAuto(const std::vector<ojson>& functions,
                                     chat_parse::ToolCallGrammarOptions options, ParsedRequest* out) {
  const ToolRequest& t = out->tools;
  if ((t.format != ToolCallFormat::kHermes && t.format != ToolCallFormat::kQwen3Coder) ||
      out->params.structured.kind != grammar::StructuredKind::kNone)
    return std::nullopt;
  bool any_strict = false;
  for (const ojson& f : functions) any_strict = any_strict || IsStrict(f);
  if (!any_strict) return std::nullopt;
  std::vector<ojson> allowed;
  for (const ojson& f : functions) {
    ojson g = f;
    if (!IsStrict(f)) g["parameters"] = ojson{{"type", "object"}};
    allowed.push_back(std::move(g));
  }
  options.allow_text = true;
  options.parallel = t.parallel;
  options.format = t.format;
  auto gbnf = chat_parse::ToolCallGbnf(allowed, options);
  if (!gbnf.ok()) return Invalid("tools", fmt::format("Cannot enforce a strict function: {}", gbnf.status().message()));
  out->params.structured = {grammar::StructuredKind::kGrammar, *gbnf};
  out->tools.constrained = true;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseToolParams(const ojson& body, ToolCallFormat format, bool reasoning_parser,
                                        ParsedRequest* out) {
  std::vector<ojson> functions;
  if (const ojson* tools = Present(body, "tools")) {
    if (!tools->is_array()) return Invalid("tools", "'tools' must be an array.", "invalid_type");
    if (auto e = CheckTools(*tools, &functions)) return e;
    if (!tools->empty()) out->chat_options.tools = *tools;
  }
  ToolRequest& t = out->tools;
  t.choice = functions.empty() ? ToolRequest::Choice::kNone : ToolRequest::Choice::kAuto;
  if (const ojson* p = Present(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) return Invalid("parallel_tool_calls", "'parallel_tool_calls' must be a boolean.", "invalid_type");
    t.parallel = p->get<bool>();
  }
  if (const ojson* tc = Present(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string& v = tc->get_ref<const std::string&>();
      if (v == "none") t.choice = ToolRequest::Choice::kNone;
      else if (v == "auto") t.choice = functions.empty() ? ToolRequest::Choice::kNone : ToolRequest::Choice::kAuto;
      else if (v == "required") t.choice = ToolRequest::Choice::kRequired;
      else return Invalid("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or an object.");
    } else if (tc->is_object()) {
      const ojson* type = Present(*tc, "type");
      const ojson* f = Present(*tc, "function");
      const ojson* name = f && f->is_object() ? Present(*f, "name") : nullptr;
      if (!type || !type->is_string() || type->get_ref<const std::string&>() != "function" || !name ||
          !name->is_string())
        return Invalid("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", "
                                      "\"function\": {\"name\": ...}}.");
      t.choice = ToolRequest::Choice::kNamed;
      t.name = name->get<std::string>();
    } else {
      return Invalid("tool_choice", fmt::format("'tool_choice' must be a string or an object, got {}.", tc->type_name()),
                     "invalid_type");
    }
  }
  const bool forced = t.choice == ToolRequest::Choice::kRequired || t.choice == ToolRequest::Choice::kNamed;
  if (forced && functions.empty())
    return Invalid("tool_choice", "'tool_choice' requires a tool call but 'tools' is empty or absent.");
  t.format = t.choice == ToolRequest::Choice::kAuto ? format : ToolCallFormat::kNone;
  // Mistral's [TOOL_CALLS] marker is a special token: kept in the text, or the parser never sees
  // a call (vLLM's Mistral tool parser does the same to the request).
  if (format == ToolCallFormat::kMistral && t.choice != ToolRequest::Choice::kNone)
    out->params.skip_special_tokens = false;
  chat_parse::ToolCallGrammarOptions options;
  // A think block before the calls only when something takes it out again.
  options.allow_think = reasoning_parser;
  if (const ojson* kw = Present(body, "chat_template_kwargs"); kw && kw->is_object() && reasoning_parser) {
    if (const ojson* think = Present(*kw, "enable_thinking"); think && think->is_boolean())
      options.allow_think = think->get<bool>();
  }
  if (!forced) return StrictInAuto(functions, options, out);

  std::vector<ojson> allowed;
  if (t.choice == ToolRequest::Choice::kNamed) {
    for (const ojson& f : functions)
      if (f["name"] == t.name) allowed.push_back(f);
    if (allowed.empty())
      return Invalid("tool_choice", fmt::format("'tool_choice' names function '{}', which is not in 'tools'.",
                                                http::ClientText(t.name)));
  } else {
    allowed = functions;
  }
  if (out->params.structured.kind != grammar::StructuredKind::kNone)
    return Invalid("tool_choice", "'tool_choice' \"required\" or a named function cannot be combined with "
                                  "response_format or guided decoding.");
  options.parallel = t.parallel && t.choice == ToolRequest::Choice::kRequired;
  options.format = chat_parse::ForcedCallFormat(format);
  auto gbnf = chat_parse::ToolCallGbnf(allowed, options);
  if (!gbnf.ok()) return Invalid("tools", fmt::format("Cannot enforce 'tool_choice': {}", gbnf.status().message()));
  out->params.structured = {grammar::StructuredKind::kGrammar, *gbnf};
  out->tools.constrained = true;
  t.format = options.format;
  return std::nullopt;
}

}  // namespace tandem::openai
