#include "chat_parse/tool_grammar.h"

#include <algorithm>

#include <fmt/format.h>

#include "chat_parse/tool_calls.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace tandem::chat_parse {

using ojson = nlohmann::ordered_json;
using grammar::Grammar;

namespace {

// Copies `src` into `dst` with its rule names prefixed; returns the rule number of src's root.
int Embed(Grammar& dst, const Grammar& src, const std::string& prefix) {
  std::vector<int> rule_of(src.rules().size());
  for (size_t r = 0; r < src.rules().size(); ++r)
    rule_of[r] = dst.RuleNamed(prefix + src.rule(static_cast<int>(r)).name);
  std::vector<int> expr_of(src.exprs().size());
  for (size_t i = 0; i < src.exprs().size(); ++i) {
    const grammar::Expr& e = src.expr(static_cast<int>(i));
    std::vector<int> kids;
    for (int c : e.children) kids.push_back(expr_of[c]);
    switch (e.kind) {
      case grammar::ExprKind::kEmpty: expr_of[i] = dst.Empty(); break;
      case grammar::ExprKind::kBytes: expr_of[i] = dst.Bytes(e.bytes); break;
      case grammar::ExprKind::kCharClass: expr_of[i] = dst.CharClass(e.ranges, e.negated); break;
      case grammar::ExprKind::kSequence: expr_of[i] = dst.Sequence(std::move(kids)); break;
      case grammar::ExprKind::kChoice: expr_of[i] = dst.Choice(std::move(kids)); break;
      case grammar::ExprKind::kRepeat: expr_of[i] = dst.Repeat(kids[0], e.min, e.max); break;
      case grammar::ExprKind::kRuleRef: expr_of[i] = dst.RuleRef(rule_of[e.rule]); break;
    }
  }
  for (size_t r = 0; r < src.rules().size(); ++r)
    dst.SetBody(rule_of[r], expr_of[src.rule(static_cast<int>(r)).body]);
  return rule_of[src.root()];
}

// Any text in which `pattern` does not occur; pattern[0] must not occur again in it ("</think>",
// "<tool_call>"). An occurrence then lies within one segment that starts at pattern[0] and runs to
// the next pattern[0], so the text is [^p0]* (p0 W)* with W any [^p0]* that does not start with
// the rest of the pattern: nested choices, no recursion (the matcher's stacks stay flat).
int TextWithout(Grammar& g, std::string_view pattern) {
  const uint32_t p0 = static_cast<unsigned char>(pattern[0]);
  auto plain = [&] { return g.Repeat(g.CharClass({{p0, p0}}, true), 0, grammar::kUnbounded); };
  const std::string_view rest = pattern.substr(1);
  int w = -1;
  for (size_t j = rest.size(); j-- > 0;) {
    const uint32_t c = static_cast<unsigned char>(rest[j]);
    std::vector<int> alts{g.Empty(), g.Sequence({g.CharClass({{p0, p0}, {c, c}}, true), plain()})};
    if (w >= 0) alts.push_back(g.Sequence({g.Bytes(std::string(1, rest[j])), w}));
    w = g.Choice(std::move(alts));
  }
  return g.Sequence({plain(), g.Repeat(g.Sequence({g.Bytes(std::string(1, pattern[0])), w}), 0, grammar::kUnbounded)});
}

}  // namespace

ToolCallFormat ForcedCallFormat(ToolCallFormat parser) {
  if (parser == ToolCallFormat::kLlama3Json || parser == ToolCallFormat::kQwen3Coder ||
      parser == ToolCallFormat::kMistral)
    return parser;
  return ToolCallFormat::kHermes;
}

namespace {

// Function i's arguments schema as a rule of `g`.
Result<int> SchemaRule(Grammar& g, const ojson& schema, const std::string& prefix, const std::string& what) {
  grammar::JsonSchemaOptions schema_options;
  schema_options.any_whitespace = false;
  auto args = grammar::JsonSchemaToGrammar(CompactJson(schema), schema_options);
  if (!args.ok()) return Err(StatusCode::kInvalidArgument, "{}: {}", what, args.status().message());
  return g.RuleRef(Embed(g, *args, prefix));
}

// A string parameter's value as qwen3_coder writes it (raw text): any text without
// "</parameter>"; one of its enum values; with minLength / maxLength, that many code points other
// than '<'. Other string keywords cannot be enforced on raw text.
Result<int> RawStringValue(Grammar& g, const ojson& schema, const std::string& what) {
  int min = 0, max = grammar::kUnbounded;
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    const std::string& k = it.key();
    if (k == "minLength" || k == "maxLength") {
      if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() > 100000)
        return Err(StatusCode::kInvalidArgument, "{}: '{}' must be an integer from 0 to 100000", what, k);
      (k == "minLength" ? min : max) = static_cast<int>(it.value().get<uint64_t>());
    } else if (k != "type" && k != "enum" && k != "description" && k != "title" && k != "default" && k != "examples") {
      return Err(StatusCode::kInvalidArgument, "{}: string keyword '{}' cannot be enforced on qwen3_coder's raw text", what, k);
    }
  }
  if (max != grammar::kUnbounded && min > max) return Err(StatusCode::kInvalidArgument, "{}: minLength above maxLength", what);
  auto e = schema.find("enum");
  if (e == schema.end()) {
    if (min == 0 && max == grammar::kUnbounded) return TextWithout(g, "</parameter>");
    return g.Repeat(g.CharClass({{'<', '<'}}, /*negated=*/true), min, max);
  }
  std::vector<int> alts;
  for (const ojson& v : *e) {
    if (!v.is_string()) return Err(StatusCode::kInvalidArgument, "{}: enum values of a string must be strings", what);
    alts.push_back(g.Bytes(v.get<std::string>()));
  }
  if (alts.empty()) return Err(StatusCode::kInvalidArgument, "{}: empty enum", what);
  return g.Choice(std::move(alts));
}

// <tool_call>\n<function=NAME>\n(<parameter=P>\nVALUE\n</parameter>\n)*</function>\n</tool_call>,
// the properties in the schema's order, the required ones always there.
Result<int> Qwen3CoderCall(Grammar& g, const std::string& name, const ojson* params, size_t i) {
  std::vector<int> seq{g.Bytes("<tool_call>\n<function=" + name + ">\n")};
  if (params && params->is_object()) {
    std::vector<std::string> required;
    if (auto r = params->find("required"); r != params->end() && r->is_array())
      for (const ojson& x : *r)
        if (x.is_string()) required.push_back(x.get<std::string>());
    auto props = params->find("properties");
    if (props != params->end() && props->is_object()) {
      size_t j = 0;
      for (auto it = props->begin(); it != props->end(); ++it, ++j) {
        const std::string& p = it.key();
        const std::string what = fmt::format("function '{}' parameter '{}'", name, p);
        if (p.empty() || p.find_first_of("<>\n") != std::string::npos)
          return Err(StatusCode::kInvalidArgument, "{}: the name cannot be written in qwen3_coder's format", what);
        const ojson& s = it.value();
        const bool raw = s.is_object() && s.value("type", ojson()) == "string";
        Result<int> value = raw ? RawStringValue(g, s, what) : SchemaRule(g, s, fmt::format("f{}_p{}_", i, j), what);
        if (!value.ok()) return value.status();
        const int param = g.Sequence({g.Bytes("<parameter=" + p + ">\n"), *value, g.Bytes("\n</parameter>\n")});
        const bool req = std::find(required.begin(), required.end(), p) != required.end();
        seq.push_back(req ? param : g.Repeat(param, 0, 1));
      }
    }
  }
  seq.push_back(g.Bytes("</function>\n</tool_call>"));
  return g.Sequence(std::move(seq));
}

}  // namespace

Result<std::string> ToolCallGbnf(const std::vector<ojson>& functions,
                                 const ToolCallGrammarOptions& options) {
  if (functions.empty()) return Err(StatusCode::kInvalidArgument, "no function to call");
  const bool llama = options.format == ToolCallFormat::kLlama3Json;
  const bool coder = options.format == ToolCallFormat::kQwen3Coder;
  const bool mistral = options.format == ToolCallFormat::kMistral;
  if (!llama && !coder && !mistral && options.format != ToolCallFormat::kHermes)
    return Err(StatusCode::kInvalidArgument, "tool calls cannot be forced in the {} format",
               ToolCallFormatName(options.format));
  if (llama && options.allow_text)
    return Err(StatusCode::kInvalidArgument, "llama3_json calls are the whole output: no text before them");
  Grammar g;
  const int root = g.RuleNamed("root");
  std::vector<int> alternatives;
  for (size_t i = 0; i < functions.size(); ++i) {
    const ojson& f = functions[i];
    const std::string name = f.value("name", "");
    auto params = f.find("parameters");
    const bool absent = params == f.end() || params->is_null();
    if (coder) {
      Result<int> call = Qwen3CoderCall(g, name, absent ? nullptr : &*params, i);
      if (!call.ok()) return call.status();
      alternatives.push_back(*call);
      continue;
    }
    Result<int> args = SchemaRule(g, absent ? ojson{{"type", "object"}} : *params, fmt::format("f{}_", i),
                                  fmt::format("function '{}'", name));
    if (!args.ok()) return args.status();
    const std::string quoted = CompactJson(ojson(name));
    const std::string head = llama     ? "{\"name\": " + quoted + ", \"parameters\": "
                             : mistral ? "{\"name\": " + quoted + ", \"arguments\": "
                                       : "<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ";
    alternatives.push_back(
        g.Sequence({g.Bytes(head), *args, g.Bytes(llama || mistral ? "}" : "}\n</tool_call>")}));
  }
  const int call_rule = g.RuleNamed("call");
  g.SetBody(call_rule, alternatives.size() == 1 ? alternatives[0] : g.Choice(alternatives));
  std::vector<int> seq;
  if (options.allow_think) {
    const int think_rule = g.RuleNamed("think");
    const int body = TextWithout(g, "</think>");
    const int ws = g.Repeat(g.CharClass({{'\n', '\n'}, {' ', ' '}}, false), 0, 4);
    g.SetBody(think_rule, g.Sequence({g.Bytes("<think>"), body, g.Bytes("</think>"), ws}));
    seq.push_back(g.Repeat(g.RuleRef(think_rule), 0, 1));
  }
  int calls = g.RuleRef(call_rule);
  const char* separator = llama ? "; " : mistral ? ", " : "\n";
  if (options.parallel)
    calls = g.Sequence({calls, g.Repeat(g.Sequence({g.Bytes(separator), g.RuleRef(call_rule)}), 0,
                                        grammar::kUnbounded)});
  if (mistral) calls = g.Sequence({g.Bytes("[TOOL_CALLS]["), calls, g.Bytes("]")});
  if (options.allow_text) {
    const int text_rule = g.RuleNamed("text");
    g.SetBody(text_rule, TextWithout(g, mistral ? "[TOOL_CALLS]" : "<tool_call>"));
    seq.push_back(g.RuleRef(text_rule));
    calls = g.Repeat(calls, 0, 1);
  }
  seq.push_back(calls);
  g.SetBody(root, g.Sequence(seq));
  g.set_root(root);
  if (Status st = g.Validate(); !st.ok()) return st;
  return g.ToGbnf();
}

}  // namespace tandem::chat_parse
