#include "frontend/structured_output_params.h"

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "grammar/json_schema.h"
#include "grammar/structured_output.h"

namespace tandem::openai {

namespace {

using ojson = nlohmann::ordered_json;
using grammar::StructuredKind;
using grammar::StructuredOutputSpec;

constexpr size_t kMaxSpecBytes = 1 << 20;  // grammar/json_schema.h's limit, for every kind

ApiError Invalid(const std::string& param, std::string message, const char* code = "invalid_value") {
  ApiError e;
  e.message = std::move(message);
  e.param = param;
  e.code = code;
  return e;
}

const ojson* Present(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

struct Found {
  std::string param;
  StructuredOutputSpec spec;
};

// A schema given as an object (or boolean), or as its JSON text.
std::optional<ApiError> SchemaText(const std::string& param, const ojson& v, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
  } else if (v.is_object() || v.is_boolean()) {
    if (grammar::JsonNestedDeeperThan(v, grammar::kMaxJsonNesting)) {  // before dump() recurses
      return Invalid(param, fmt::format("'{}' is nested deeper than {} levels.", param, grammar::kMaxJsonNesting));
    }
    *out = v.dump();
  } else {
    return Invalid(param, fmt::format("'{}' must be a JSON Schema (an object).", param));
  }
  return std::nullopt;
}

std::optional<ApiError> ChoiceText(const std::string& param, const ojson& v, std::string* out) {
  if (!v.is_array() || v.empty()) return Invalid(param, fmt::format("'{}' must be a non-empty list of strings.", param));
  for (const ojson& c : v) {  // strings only: dump() below does not recurse
    if (!c.is_string()) return Invalid(param, fmt::format("'{}' must be a non-empty list of strings.", param));
  }
  *out = v.dump();
  return std::nullopt;
}

std::optional<ApiError> TextOf(const std::string& param, const ojson& v, std::string* out) {
  if (!v.is_string()) return Invalid(param, fmt::format("'{}' must be a string.", param));
  *out = v.get<std::string>();
  return std::nullopt;
}

// vLLM's spellings of the spec kinds: guided_<name> and structured_outputs.<name>.
constexpr std::pair<const char*, StructuredKind> kSpecKinds[] = {
    {"json", StructuredKind::kJsonSchema},
    {"regex", StructuredKind::kRegex},
    {"choice", StructuredKind::kChoice},
    {"grammar", StructuredKind::kGrammar}};

const StructuredKind* KindNamed(const std::string& name) {
  for (const auto& [n, kind] : kSpecKinds) {
    if (name == n) return &kind;
  }
  return nullptr;
}

// The spec text of `v` for `kind`: a schema (object or text), a list of strings, or a string.
std::optional<ApiError> SpecText(const std::string& param, StructuredKind kind, const ojson& v, std::string* out) {
  if (kind == StructuredKind::kJsonSchema) return SchemaText(param, v, out);
  if (kind == StructuredKind::kChoice) return ChoiceText(param, v, out);
  return TextOf(param, v, out);
}

std::optional<ApiError> Collect(const ojson& body, std::vector<Found>* found) {
  if (const ojson* rf = Present(body, "response_format")) {
    if (!rf->is_object()) return Invalid("response_format", "'response_format' must be an object.", "invalid_type");
    const ojson* type = Present(*rf, "type");
    if (!type || !type->is_string()) return Invalid("response_format.type", "'response_format.type' must be a string.", "invalid_type");
    const std::string t = type->get<std::string>();
    if (t == "json_object") {
      found->push_back({"response_format", {StructuredKind::kJsonObject, ""}});
    } else if (t == "json_schema") {
      const ojson* js = Present(*rf, "json_schema");
      if (!js || !js->is_object()) {
        return Invalid("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'.");
      }
      if (const ojson* name = Present(*js, "name"); name && !name->is_string()) {
        return Invalid("response_format.json_schema.name", "'response_format.json_schema.name' must be a string.");
      }
      const ojson* schema = Present(*js, "schema");
      Found f{"response_format.json_schema.schema", {StructuredKind::kJsonSchema, "{}"}};
      if (schema) {
        if (auto e = SchemaText(f.param, *schema, &f.spec.spec)) return e;
      }
      found->push_back(std::move(f));
    } else if (t != "text") {
      return Invalid("response_format.type",
                     fmt::format("'response_format.type' must be 'text', 'json_object' or 'json_schema', got '{}'.", t));
    }
  }
  for (const auto& [name, kind] : kSpecKinds) {
    if (const ojson* v = Present(body, (std::string("guided_") + name).c_str())) {
      Found f{std::string("guided_") + name, {kind, ""}};
      if (auto e = SpecText(f.param, kind, *v, &f.spec.spec)) return e;
      found->push_back(std::move(f));
    }
  }
  if (const ojson* so = Present(body, "structured_outputs")) {
    if (!so->is_object()) return Invalid("structured_outputs", "'structured_outputs' must be an object.", "invalid_type");
    for (const auto& [key, v] : so->items()) {
      if (v.is_null()) continue;
      const std::string param = "structured_outputs." + key;
      Found f{param, {}};
      if (const StructuredKind* kind = KindNamed(key)) {
        f.spec.kind = *kind;
        if (auto e = SpecText(param, *kind, v, &f.spec.spec)) return e;
      } else if (key == "json_object") {
        if (!v.is_boolean()) return Invalid(param, fmt::format("'{}' must be a boolean.", param));
        if (!v.get<bool>()) continue;
        f.spec.kind = StructuredKind::kJsonObject;
      } else if (key == "disable_any_whitespace" || key == "disable_fallback") {
        continue;  // the first is read by ParseStructuredOutput, the second changes nothing here
      } else if (key == "disable_additional_properties" || key == "whitespace_pattern" ||
                 key == "structural_tag") {
        return Invalid(param, fmt::format("'{}' is not supported.", param));
      } else {
        return Invalid(param, fmt::format("'{}' is not a structured output option.", param));
      }
      found->push_back(std::move(f));
    }
  }
  if (Present(body, "guided_whitespace_pattern")) {
    return Invalid("guided_whitespace_pattern", "'guided_whitespace_pattern' is not supported.");
  }
  if (const ojson* v = Present(body, "guided_decoding_backend"); v && !v->is_string()) {
    return Invalid("guided_decoding_backend", "'guided_decoding_backend' must be a string.");
  }
  return std::nullopt;
}

grammar::StructuredOutputCache& Cache() {
  static grammar::StructuredOutputCache cache;
  return cache;
}

}  // namespace

std::optional<ApiError> ParseStructuredOutput(const ojson& body, SamplingParams* params) {
  std::vector<Found> found;
  if (auto e = Collect(body, &found)) return e;
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) {
    return Invalid(found[1].param, fmt::format("Only one structured output may be given, got '{}' and '{}'.",
                                               found[0].param, found[1].param));
  }
  Found& f = found[0];
  if (f.spec.spec.size() > kMaxSpecBytes) {
    return Invalid(f.param, fmt::format("'{}' is {} bytes, over the limit of {}.", f.param, f.spec.spec.size(), kMaxSpecBytes));
  }
  if (const ojson* so = Present(body, "structured_outputs")) {
    if (const ojson* w = Present(*so, "disable_any_whitespace"); w && w->is_boolean()) {
      f.spec.any_whitespace = !w->get<bool>();
    }
  }
  auto compiled = Cache().Get(f.spec);
  if (!compiled.ok()) {
    return Invalid(f.param, fmt::format("Invalid '{}': {}", f.param, compiled.status().message()));
  }
  params->structured = std::move(f.spec);
  return std::nullopt;
}

}  // namespace tandem::openai
