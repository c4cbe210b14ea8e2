#include "grammar/structured_output.h"

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace tandem::grammar {

const char* KindName(StructuredKind kind) {
  switch (kind) {
    case StructuredKind::kNone: return "none";
    case StructuredKind::kJsonObject: return "json_object";
    case StructuredKind::kJsonSchema: return "json_schema";
    case StructuredKind::kRegex: return "regex";
    case StructuredKind::kChoice: return "choice";
    case StructuredKind::kGrammar: return "grammar";
  }
  return "unknown";
}

namespace {

Result<Grammar> ChoiceGrammar(const std::string& spec) {
  nlohmann::json list = nlohmann::json::parse(spec, nullptr, false);
  if (!list.is_array() || list.empty()) {
    return Status(StatusCode::kInvalidArgument, "choice must be a non-empty list of strings");
  }
  Grammar g;
  std::vector<int> alts;
  for (const auto& c : list) {
    if (!c.is_string()) return Status(StatusCode::kInvalidArgument, "choice must list strings");
    alts.push_back(g.Bytes(c.get<std::string>()));
  }
  const int root = g.RuleNamed("root");
  g.SetBody(root, g.Choice(std::move(alts)));
  g.set_root(root);
  return g;
}

}  // namespace

Result<std::shared_ptr<const Automaton>> CompileStructuredOutput(const StructuredOutputSpec& spec) {
  Result<Grammar> g = Status(StatusCode::kInvalidArgument, "no structured output requested");
  JsonSchemaOptions json;
  json.any_whitespace = spec.any_whitespace;
  switch (spec.kind) {
    case StructuredKind::kNone: break;
    case StructuredKind::kJsonObject: g = JsonObjectGrammar(json); break;
    case StructuredKind::kJsonSchema: g = JsonSchemaToGrammar(spec.spec, json); break;
    case StructuredKind::kRegex: g = RegexToGrammar(spec.spec); break;
    case StructuredKind::kChoice: g = ChoiceGrammar(spec.spec); break;
    case StructuredKind::kGrammar: g = ParseGbnf(spec.spec); break;
  }
  if (!g.ok()) return g.status();
  auto a = Automaton::Compile(*g);
  if (!a.ok()) return a.status();
  return std::make_shared<const Automaton>(std::move(*a));
}

StructuredOutputCache::Key StructuredOutputCache::KeyOf(const StructuredOutputSpec& spec) {
  Key k;
  k += static_cast<char>('0' + static_cast<int>(spec.kind));
  k += spec.any_whitespace ? 'w' : 'c';
  k += spec.spec;
  return k;
}

Result<std::shared_ptr<const Automaton>> StructuredOutputCache::Get(const StructuredOutputSpec& spec) {
  const Key key = KeyOf(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
  }
  auto compiled = CompileStructuredOutput(spec);  // outside the lock: compiles run in parallel
  if (!compiled.ok()) return compiled.status();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) return it->second.first;
  order_.push_front(key);
  map_.emplace(key, std::make_pair(*compiled, order_.begin()));
  while (map_.size() > capacity_) {
    map_.erase(order_.back());
    order_.pop_back();
  }
  return *compiled;
}

size_t StructuredOutputCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

}  // namespace tandem::grammar
