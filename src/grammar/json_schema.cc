#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/json_limits.h"
#include "grammar/json_schema_parts.h"
#include "grammar/regex.h"

namespace tandem::grammar {

namespace {

using Json = nlohmann::ordered_json;
using json_detail::JsonRules;

const std::set<std::string, std::less<>>& Annotations() {
  static const std::set<std::string, std::less<>> k = {
      "title", "description", "$schema", "$id", "$comment", "examples", "default",
      "deprecated", "readOnly", "writeOnly", "$defs", "definitions",
      // OpenAPI 3.0's "nullable": true (the openai client's zod helper emits it) only widens the
      // type by null, which JSON Schema validators do not read: generating without null is valid
      // under both readings.
      "nullable"};
  return k;
}

const std::set<std::string, std::less<>>& Enforced() {
  static const std::set<std::string, std::less<>> k = {
      "type", "properties", "required", "additionalProperties", "enum", "const", "items",
      "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "minLength",
      "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
      "exclusiveMaximum"};
  return k;
}

class Converter {
 public:
  Converter(const Json& root, const JsonSchemaOptions& o) : root_(root), options_(o) {
    rules_ = json_detail::AddJsonRules(g_, o.any_whitespace);
  }

  Result<Grammar> Run() {
    const int root = g_.RuleNamed("root");
    TANDEM_ASSIGN_OR_RETURN(int body, Visit(root_, 0, "#"));
    g_.SetBody(root, body);
    g_.set_root(root);
    TANDEM_RETURN_IF_ERROR(g_.Validate());
    return std::move(g_);
  }

 private:
  static Status Bad(const std::string& where, const std::string& what) {
    return Err(StatusCode::kInvalidArgument, "json schema at {}: {}", where, what);
  }
  int Lit(const std::string& s) { return g_.Bytes(s); }

  // "#" or "#/json/pointer" within the root; null when it is neither or points nowhere.
  const Json* Resolve(const std::string& ref) const {
    if (ref == "#") return &root_;
    if (ref.size() < 2 || ref[0] != '#' || ref[1] != '/') return nullptr;
    try {
      Json::json_pointer ptr(ref.substr(1));
      return root_.contains(ptr) ? &root_.at(ptr) : nullptr;
    } catch (const nlohmann::json::exception&) {  // a bad escape (~2) or array index
      return nullptr;
    }
  }
  int Ws() { return g_.RuleRef(rules_.ws); }

  Result<int> Visit(const Json& s, int depth, const std::string& at) {
    if (depth > options_.max_depth) return Bad(at, "nested deeper than " + std::to_string(options_.max_depth));
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Bad(at, "the schema false allows no value");
      return g_.RuleRef(rules_.value);
    }
    if (!s.is_object()) return Bad(at, "a schema must be an object or a boolean");
    for (const auto& [key, v] : s.items()) {
      if (!Annotations().count(key) && !Enforced().count(key)) {
        return Bad(at, "keyword '" + key + "' is not supported");
      }
    }
    if (s.contains("$ref")) return Ref(s, depth, at);
    if (s.contains("const")) return Lit(s["const"].dump());
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return Bad(at, "enum must be a non-empty array");
      std::vector<int> alts;
      for (const Json& v : s["enum"]) alts.push_back(Lit(v.dump()));
      return g_.Choice(std::move(alts));
    }
    if (s.contains("allOf")) return AllOf(s, depth, at);
    if (s.contains("anyOf") || s.contains("oneOf")) return AnyOf(s, depth, at);
    return Typed(s, depth, at);
  }

  Result<int> Ref(const Json& s, int depth, const std::string& at) {
    if (!s["$ref"].is_string()) return Bad(at, "$ref must be a string");
    const std::string ref = s["$ref"];
    auto found = refs_.find(ref);
    if (found != refs_.end()) return g_.RuleRef(found->second);
    if (ref.empty() || ref[0] != '#') return Bad(at, "only local $ref ('#...') is supported: " + ref);
    const Json* target = Resolve(ref);
    if (!target) return Bad(at, "$ref " + ref + " does not resolve");
    const int rule = g_.RuleNamed("ref" + std::to_string(refs_.size()));
    refs_.emplace(ref, rule);
    TANDEM_ASSIGN_OR_RETURN(int body, Visit(*target, depth + 1, ref));
    g_.SetBody(rule, body);
    return g_.RuleRef(rule);
  }

  Result<int> AnyOf(const Json& s, int depth, const std::string& at) {
    const bool one = s.contains("oneOf");
    const Json& branches = one ? s["oneOf"] : s["anyOf"];
    if (!branches.is_array() || branches.empty()) return Bad(at, "anyOf/oneOf must be a non-empty array");
    if (one && !Disjoint(branches)) {
      return Bad(at, "oneOf whose branches may overlap is not supported (give them different types "
                     "or a const property that tells them apart, or use anyOf)");
    }
    // Keywords beside anyOf apply to every branch: merge them in.
    std::vector<int> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      Json branch = branches[i];
      if (branch.is_object()) {
        for (const auto& [key, v] : s.items()) {
          if (key != "anyOf" && key != "oneOf" && !Annotations().count(key) && !branch.contains(key)) branch[key] = v;
        }
      }
      TANDEM_ASSIGN_OR_RETURN(int alt, Visit(branch, depth + 1, at + "/" + (one ? "oneOf/" : "anyOf/") + std::to_string(i)));
      alts.push_back(alt);
    }
    return g_.Choice(std::move(alts));
  }

  // Branches that no value can satisfy twice: each names types disjoint from the others', or all
  // are objects requiring one property with a const/enum the others do not share.
  static std::optional<std::set<std::string>> TypesOf(const Json& b) {
    if (!b.is_object() || !b.contains("type")) return std::nullopt;
    std::set<std::string> t;
    if (b["type"].is_string()) t.insert(b["type"].get<std::string>());
    if (b["type"].is_array()) for (const Json& x : b["type"]) if (x.is_string()) t.insert(x.get<std::string>());
    if (t.count("number")) t.insert("integer");
    return t;
  }
  static bool Disjoint(const Json& branches) {
    std::set<std::string> seen;
    bool by_type = true;
    for (const Json& b : branches) {
      auto t = TypesOf(b);
      if (!t) { by_type = false; break; }
      for (const std::string& x : *t) {
        if (!seen.insert(x).second && !(x == "integer" && t->count("number"))) by_type = false;
      }
      if (t->count("number") && seen.count("integer") && !t->count("integer")) by_type = false;
    }
    if (by_type) return true;
    // A discriminator property: required in each branch, with const/enum values all different.
    const Json& first = branches[0];
    if (!first.is_object() || !first.contains("properties")) return false;
    for (const auto& [name, unused] : first["properties"].items()) {
      std::set<std::string> values;
      bool ok = true;
      for (const Json& b : branches) {
        if (!b.is_object() || !b.contains("properties") || !b["properties"].contains(name) ||
            !b.contains("required") || std::find(b["required"].begin(), b["required"].end(), name) == b["required"].end()) {
          ok = false;
          break;
        }
        const Json& p = b["properties"][name];
        std::vector<Json> vs;
        if (p.contains("const")) vs.push_back(p["const"]);
        else if (p.contains("enum") && p["enum"].is_array()) for (const Json& v : p["enum"]) vs.push_back(v);
        else { ok = false; break; }
        for (const Json& v : vs) if (!values.insert(v.dump()).second) ok = false;
      }
      if (ok) return true;
    }
    return false;
  }

  Result<int> AllOf(const Json& s, int depth, const std::string& at) {
    if (!s["allOf"].is_array()) return Bad(at, "allOf must be an array");
    Json merged = s;
    merged.erase("allOf");
    // additionalProperties false in a part (or beside allOf) allows only that part's own
    // properties: the object may hold only keys every such part lists.
    std::optional<std::set<std::string>> allowed;
    auto close_over = [&](const Json& part) -> Status {
      if (!part.contains("additionalProperties")) return Status::Ok();
      const Json& extra = part["additionalProperties"];
      if (!extra.is_boolean()) return Bad(at, "allOf with an additionalProperties schema is not supported");
      if (extra.get<bool>()) return Status::Ok();
      std::set<std::string> own;
      if (part.contains("properties")) for (const auto& [name, p] : part["properties"].items()) own.insert(name);
      if (!allowed) {
        allowed = own;
      } else {
        std::set<std::string> both;
        for (const std::string& k : *allowed) if (own.count(k)) both.insert(k);
        allowed = both;
      }
      return Status::Ok();
    };
    TANDEM_RETURN_IF_ERROR(close_over(s));
    merged.erase("additionalProperties");
    for (const Json& part0 : s["allOf"]) {
      Json part = part0;
      if (part.is_object() && part.contains("$ref") && part.size() == 1 && part["$ref"].is_string()) {
        if (const Json* target = Resolve(part["$ref"].get<std::string>())) part = *target;  // to merge it
      }
      if (!part.is_object()) return Bad(at, "allOf parts must be object schemas");
      TANDEM_RETURN_IF_ERROR(close_over(part));
      for (const auto& [key, v] : part.items()) {
        if (key == "additionalProperties") continue;
        if (key == "properties") {
          for (const auto& [name, p] : v.items()) {
            if (merged["properties"].contains(name) && merged["properties"][name] != p) {
              merged["properties"][name] = Json{{"allOf", Json::array({merged["properties"][name], p})}};
            } else {
              merged["properties"][name] = p;
            }
          }
        } else if (key == "required") {
          for (const Json& r : v) {
            if (std::find(merged["required"].begin(), merged["required"].end(), r) == merged["required"].end()) merged["required"].push_back(r);
          }
        } else if (key == "type") {
          if (merged.contains("type") && merged["type"] != v) return Bad(at, "allOf with different types is not supported");
          merged["type"] = v;
        } else if (Annotations().count(key)) {
        } else if (merged.contains(key) && merged[key] != v) {
          return Bad(at, "allOf with two values of '" + key + "' is not supported");
        } else {
          merged[key] = v;
        }
      }
    }
    if (allowed) {
      if (merged.contains("properties")) {
        Json kept = Json::object();
        for (const auto& [name, p] : merged["properties"].items()) if (allowed->count(name)) kept[name] = p;
        merged["properties"] = kept;
      }
      if (merged.contains("required")) {
        for (const Json& r : merged["required"]) {
          if (!allowed->count(r.get<std::string>())) {
            return Bad(at, "allOf requires property '" + r.get<std::string>() +
                               "' that an additionalProperties false forbids: no value satisfies it");
          }
        }
      }
      merged["additionalProperties"] = false;
    }
    return Visit(merged, depth + 1, at + "/allOf");
  }

  Result<int> Typed(const Json& s, int depth, const std::string& at) {
    std::vector<std::string> types;
    if (!s.contains("type")) {
      // No type: infer it from the keywords, else any value.
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) types = {"object"};
      else if (s.contains("items") || s.contains("prefixItems")) types = {"array"};
      else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) types = {"string"};
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) types = {"number"};
      else return g_.RuleRef(rules_.value);
    } else if (s["type"].is_string()) {
      types = {s["type"].get<std::string>()};
    } else if (s["type"].is_array() && !s["type"].empty()) {
      for (const Json& t : s["type"]) {
        if (!t.is_string()) return Bad(at, "type must be a string or a list of strings");
        types.push_back(t.get<std::string>());
      }
    } else {
      return Bad(at, "type must be a string or a non-empty list of strings");
    }
    std::vector<int> alts;
    for (const std::string& t : types) {
      int e = -1;
      if (t == "string") {
        TANDEM_ASSIGN_OR_RETURN(e, String(s, at));
      } else if (t == "integer" || t == "number") {
        TANDEM_ASSIGN_OR_RETURN(e, Number(s, t == "integer", at));
      } else if (t == "boolean") {
        e = g_.Choice({Lit("true"), Lit("false")});
      } else if (t == "null") {
        e = Lit("null");
      } else if (t == "object") {
        TANDEM_ASSIGN_OR_RETURN(e, Object(s, depth, at));
      } else if (t == "array") {
        TANDEM_ASSIGN_OR_RETURN(e, Array(s, depth, at));
      } else {
        return Bad(at, "unknown type '" + t + "'");
      }
      alts.push_back(e);
    }
    return g_.Choice(std::move(alts));
  }

  Result<int> String(const Json& s, const std::string& at) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if ((s.contains("pattern") || s.contains("format")) && (has_len || (s.contains("pattern") && s.contains("format")))) {
      return Bad(at, "pattern, format and minLength/maxLength together are not supported (one of them)");
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return Bad(at, "pattern must be a string");
      RegexInfo info;
      auto expr = RegexToExpr(s["pattern"].get<std::string>(), g_, &info);
      if (!expr.ok()) return Bad(at, expr.status().message());
      // pattern is a search: open ends match anything.
      const int any = g_.Repeat(g_.CharClass({}, true), 0, kUnbounded);
      std::vector<int> seq;
      if (!info.anchored_start) seq.push_back(any);
      seq.push_back(*expr);
      if (!info.anchored_end) seq.push_back(any);
      return g_.Sequence({Lit("\""), json_detail::JsonStringSafe(g_, g_.Sequence(std::move(seq))), Lit("\"")});
    }
    if (s.contains("format")) {
      if (!s["format"].is_string()) return Bad(at, "format must be a string");
      auto expr = json_detail::FormatContent(g_, s["format"].get<std::string>());
      if (!expr.ok()) return Bad(at, expr.status().message());
      return g_.Sequence({Lit("\""), *expr, Lit("\"")});
    }
    if (!has_len) return g_.RuleRef(rules_.string);
    TANDEM_ASSIGN_OR_RETURN(int min, Count(s, "minLength", 0, at));
    TANDEM_ASSIGN_OR_RETURN(int max, Count(s, "maxLength", kUnbounded, at));
    if (max != kUnbounded && max < min) return Bad(at, "maxLength below minLength");
    return g_.Sequence({Lit("\""), g_.Repeat(g_.RuleRef(rules_.chr), min, max), Lit("\"")});
  }

  Result<int> Count(const Json& s, const char* key, int absent, const std::string& at) {
    if (!s.contains(key)) return absent;
    const Json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>())) {
      return Bad(at, std::string(key) + " must be a non-negative integer");
    }
    if (v.get<double>() > 10000) return Bad(at, std::string(key) + " over 10000 is not supported");
    return static_cast<int>(v.get<double>());
  }

  Result<int> Number(const Json& s, bool integer, const std::string& at) {
    std::optional<double> lo, hi;
    bool lo_ex = false, hi_ex = false;
    auto num = [&](const char* key, std::optional<double>* out) -> Status {
      if (!s.contains(key)) return Status::Ok();
      if (s[key].is_boolean()) return Status::Ok();  // draft 4's exclusive flags, read below
      if (!s[key].is_number()) return Bad(at, std::string(key) + " must be a number");
      *out = s[key].get<double>();
      return Status::Ok();
    };
    TANDEM_RETURN_IF_ERROR(num("minimum", &lo));
    TANDEM_RETURN_IF_ERROR(num("maximum", &hi));
    std::optional<double> xlo, xhi;
    TANDEM_RETURN_IF_ERROR(num("exclusiveMinimum", &xlo));
    TANDEM_RETURN_IF_ERROR(num("exclusiveMaximum", &xhi));
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean()) lo_ex = s["exclusiveMinimum"].get<bool>();
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean()) hi_ex = s["exclusiveMaximum"].get<bool>();
    if (xlo && (!lo || *xlo >= *lo)) { lo = xlo; lo_ex = true; }
    if (xhi && (!hi || *xhi <= *hi)) { hi = xhi; hi_ex = true; }
    constexpr double kLimit = 9.0e15;  // integral doubles, exactly
    if ((lo && std::fabs(*lo) > kLimit) || (hi && std::fabs(*hi) > kLimit)) {
      return Bad(at, "bounds beyond 9e15 are not supported");
    }
    std::optional<int64_t> ilo, ihi;
    if (integer) {
      if (lo) ilo = static_cast<int64_t>(lo_ex ? std::floor(*lo) + 1 : std::ceil(*lo));
      if (hi) ihi = static_cast<int64_t>(hi_ex ? std::ceil(*hi) - 1 : std::floor(*hi));
      if (!ilo && !ihi) return g_.RuleRef(rules_.integer);
      auto r = json_detail::IntegerRange(g_, ilo, ihi);
      if (!r.ok()) return Bad(at, "no integer satisfies the bounds");
      return r;
    }
    if ((lo && *lo != std::floor(*lo)) || (hi && *hi != std::floor(*hi))) {
      return Bad(at, "number bounds that are not integers are not supported");
    }
    if (lo) ilo = static_cast<int64_t>(*lo);
    if (hi) ihi = static_cast<int64_t>(*hi);
    auto r = json_detail::NumberRange(g_, rules_, ilo, lo_ex, ihi, hi_ex);
    if (!r.ok()) return Bad(at, r.status().message());
    return r;
  }

  Result<int> Object(const Json& s, int depth, const std::string& at) {
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return Bad(at, "properties must be an object");
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Bad(at, "required must be an array");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return Bad(at, "required must list strings");
        required.push_back(r.get<std::string>());
      }
    }
    // The keys in order: the listed properties, then required ones not listed (any value).
    std::vector<std::pair<std::string, const Json*>> keys;
    for (const auto& [name, p] : props.items()) keys.emplace_back(name, &p);
    static const Json kAny = true;
    for (const std::string& r : required) {
      if (!props.contains(r)) keys.emplace_back(r, &kAny);
    }
    if (keys.empty()) {
      const Json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
      if (extra && extra->is_boolean() && !extra->get<bool>()) return g_.Sequence({Lit("{"), Ws(), Lit("}")});
      if (!extra || extra->is_boolean()) return g_.RuleRef(rules_.object);
      TANDEM_ASSIGN_OR_RETURN(int value, Visit(*extra, depth + 1, at + "/additionalProperties"));
      const int member = g_.Sequence({g_.RuleRef(rules_.string), Ws(), Lit(":"), Ws(), value});
      return g_.Sequence({Lit("{"), Ws(),
                          g_.Repeat(g_.Sequence({member, g_.Repeat(g_.Sequence({Ws(), Lit(","), Ws(), member}), 0, kUnbounded), Ws()}), 0, 1),
                          Lit("}")});
    }
    std::vector<int> kv;
    std::vector<bool> is_required;
    for (const auto& [name, p] : keys) {
      TANDEM_ASSIGN_OR_RETURN(int value, Visit(*p, depth + 1, at + "/properties/" + name));
      kv.push_back(g_.Sequence({Lit(Json(name).dump()), Ws(), Lit(":"), Ws(), value}));
      is_required.push_back(std::find(required.begin(), required.end(), name) != required.end());
    }
    // Items(i, first): the keys from i on, `first` when none came before (no comma yet); a rule
    // each, so that optional keys do not multiply the grammar.
    const size_t n = kv.size();
    std::vector<int> rule_first(n + 1), rule_next(n + 1);
    const std::string base = "obj" + std::to_string(objects_++);
    for (size_t i = 0; i <= n; ++i) {
      rule_first[i] = g_.RuleNamed(base + "_" + std::to_string(i) + "f");
      rule_next[i] = g_.RuleNamed(base + "_" + std::to_string(i) + "n");
    }
    const int comma = g_.Sequence({Ws(), Lit(","), Ws()});
    for (size_t i = 0; i <= n; ++i) {
      if (i == n) {
        g_.SetBody(rule_first[i], g_.Empty());
        g_.SetBody(rule_next[i], g_.Empty());
        continue;
      }
      const int with_first = g_.Sequence({kv[i], g_.RuleRef(rule_next[i + 1])});
      const int with_next = g_.Sequence({comma, kv[i], g_.RuleRef(rule_next[i + 1])});
      g_.SetBody(rule_first[i], is_required[i] ? with_first : g_.Choice({with_first, g_.RuleRef(rule_first[i + 1])}));
      g_.SetBody(rule_next[i], is_required[i] ? with_next : g_.Choice({with_next, g_.RuleRef(rule_next[i + 1])}));
    }
    return g_.Sequence({Lit("{"), Ws(), g_.RuleRef(rule_first[0]), Ws(), Lit("}")});
  }

  Result<int> Array(const Json& s, int depth, const std::string& at) {
    TANDEM_ASSIGN_OR_RETURN(int min, Count(s, "minItems", 0, at));
    TANDEM_ASSIGN_OR_RETURN(int max, Count(s, "maxItems", kUnbounded, at));
    if (max != kUnbounded && max < min) return Bad(at, "maxItems below minItems");
    // The tuple part (prefixItems, or draft 7's items array) and the rest (items / additionalItems).
    const Json* tuple = s.contains("prefixItems") ? &s["prefixItems"] : (s.contains("items") && s["items"].is_array() ? &s["items"] : nullptr);
    const Json* rest = s.contains("prefixItems") ? (s.contains("items") ? &s["items"] : nullptr)
                                                 : (s.contains("items") && !s["items"].is_array() ? &s["items"] : nullptr);
    std::vector<int> prefix;
    if (tuple) {
      for (size_t i = 0; i < tuple->size(); ++i) {
        TANDEM_ASSIGN_OR_RETURN(int e, Visit((*tuple)[i], depth + 1, at + "/prefixItems/" + std::to_string(i)));
        prefix.push_back(e);
      }
    }
    const bool rest_allowed = !(rest && rest->is_boolean() && !rest->get<bool>());
    int item = -1;
    if (rest_allowed) {
      if (rest && !rest->is_boolean()) {
        TANDEM_ASSIGN_OR_RETURN(item, Visit(*rest, depth + 1, at + "/items"));
      } else {
        item = g_.RuleRef(rules_.value);
      }
    }
    // Lengths: k = 0..: the first min(k, |prefix|) from the tuple, the others `item`.
    const int p = static_cast<int>(prefix.size());
    if (!rest_allowed && min > p) return Bad(at, "minItems above the number of prefixItems");
    const int top = rest_allowed ? max : std::min(max == kUnbounded ? p : max, p);
    const int comma = g_.Sequence({Ws(), Lit(","), Ws()});
    // body(k) for the elements after the first: written as nested optionals.
    std::function<int(int)> tail = [&](int k) -> int {  // elements k.. (k >= 1), comma-led
      if (top != kUnbounded && k >= top) return g_.Empty();
      if (k >= p && rest_allowed) {
        const int reps_min = std::max(0, min - k);
        const int reps_max = top == kUnbounded ? kUnbounded : top - k;
        return g_.Repeat(g_.Sequence({comma, item}), reps_min, reps_max);
      }
      const int here = g_.Sequence({comma, k < p ? prefix[k] : item, tail(k + 1)});
      return k < min ? here : g_.Choice({here, g_.Empty()});
    };
    if (top == 0) return g_.Sequence({Lit("["), Ws(), Lit("]")});
    const int first = p > 0 ? prefix[0] : item;
    const int elements = g_.Sequence({first, tail(1)});
    const int inner = min > 0 ? elements : g_.Choice({elements, g_.Empty()});
    return g_.Sequence({Lit("["), Ws(), inner, Ws(), Lit("]")});
  }

  const Json& root_;
  JsonSchemaOptions options_;
  Grammar g_;
  JsonRules rules_;
  std::map<std::string, int> refs_;
  int objects_ = 0;
};

}  // namespace

Result<Grammar> JsonSchemaToGrammar(std::string_view schema, const JsonSchemaOptions& options) {
  if (schema.size() > options.max_schema_bytes) {
    return Err(StatusCode::kInvalidArgument, "json schema of {} bytes is over the limit of {}",
               schema.size(), options.max_schema_bytes);
  }
  // Bounded: an object's keys cost quadratic time in ordered_json (common/json_limits.h).
  BoundedJson parsed = ParseBoundedJson(schema, kMaxJsonNesting + 1);
  if (parsed.error == JsonParseError::kInvalid) {
    return Status(StatusCode::kInvalidArgument, "json schema is not valid JSON");
  }
  if (parsed.error == JsonParseError::kTooManyKeys) {
    return Status(StatusCode::kInvalidArgument, "json schema has objects with too many keys");
  }
  Json root = std::move(parsed.value);
  if (parsed.error == JsonParseError::kTooDeep || JsonNestedDeeperThan(root, kMaxJsonNesting)) {
    return Err(StatusCode::kInvalidArgument, "json schema nested deeper than {} levels", kMaxJsonNesting);
  }
  try {
    Converter c(root, options);
    return c.Run();
  } catch (const nlohmann::json::exception& e) {  // a keyword of the wrong shape somewhere
    return Err(StatusCode::kInvalidArgument, "json schema is malformed: {}", e.what());
  }
}

bool JsonNestedDeeperThan(const nlohmann::ordered_json& value, int limit) {
  std::vector<std::pair<const nlohmann::ordered_json*, int>> todo{{&value, 0}};
  while (!todo.empty()) {
    auto [v, depth] = todo.back();
    todo.pop_back();
    if (depth > limit) return true;
    if (v->is_structured()) {
      for (const auto& child : *v) todo.emplace_back(&child, depth + 1);
    }
  }
  return false;
}

Grammar JsonObjectGrammar(const JsonSchemaOptions& options) {
  Grammar g;
  JsonRules rules = json_detail::AddJsonRules(g, options.any_whitespace);
  const int root = g.RuleNamed("root");
  g.SetBody(root, g.RuleRef(rules.object));
  g.set_root(root);
  return g;
}

}  // namespace tandem::grammar
