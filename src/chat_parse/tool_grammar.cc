#include "chat_parse/tool_grammar.h"

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

}  // namespace

Result<std::string> HermesToolCallGbnf(const std::vector<ojson>& functions,
                                       const ToolCallGrammarOptions& options) {
  if (functions.empty()) return Err(StatusCode::kInvalidArgument, "no function to call");
  Grammar g;
  const int root = g.RuleNamed("root");
  std::vector<int> alternatives;
  grammar::JsonSchemaOptions schema_options;
  schema_options.any_whitespace = false;
  for (size_t i = 0; i < functions.size(); ++i) {
    const ojson& f = functions[i];
    const std::string name = f.value("name", "");
    auto params = f.find("parameters");
    std::string schema = params == f.end() || params->is_null() ? std::string(R"({"type":"object"})")
                                                                 : CompactJson(*params);
    auto args = grammar::JsonSchemaToGrammar(schema, schema_options);
    if (!args.ok())
      return Err(StatusCode::kInvalidArgument, "function '{}': {}", name, args.status().message());
    const int args_rule = Embed(g, *args, fmt::format("f{}_", i));
    const std::string head =
        "<tool_call>\n{\"name\": " + CompactJson(ojson(name)) + ", \"arguments\": ";
    alternatives.push_back(
        g.Sequence({g.Bytes(head), g.RuleRef(args_rule), g.Bytes("}\n</tool_call>")}));
  }
  const int call_rule = g.RuleNamed("call");
  g.SetBody(call_rule, alternatives.size() == 1 ? alternatives[0] : g.Choice(alternatives));
  std::vector<int> seq;
  if (options.allow_think) {
    const int think_rule = g.RuleNamed("think");
    const int body = g.Repeat(g.CharClass({{'<', '<'}}, /*negated=*/true), 0, grammar::kUnbounded);
    const int ws = g.Repeat(g.CharClass({{'\n', '\n'}, {' ', ' '}}, false), 0, 4);
    g.SetBody(think_rule, g.Sequence({g.Bytes("<think>"), body, g.Bytes("</think>"), ws}));
    seq.push_back(g.Repeat(g.RuleRef(think_rule), 0, 1));
  }
  seq.push_back(g.RuleRef(call_rule));
  if (options.parallel)
    seq.push_back(g.Repeat(g.Sequence({g.Bytes("\n"), g.RuleRef(call_rule)}), 0, grammar::kUnbounded));
  g.SetBody(root, g.Sequence(seq));
  g.set_root(root);
  if (Status st = g.Validate(); !st.ok()) return st;
  return g.ToGbnf();
}

}  // namespace tandem::chat_parse
