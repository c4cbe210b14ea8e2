// JSON Schema to grammar (grammar.h): the language of JSON texts that validate against a schema,
// for response_format {"type":"json_schema"} and guided_json. Drafts 2020-12 and 7 spellings.
//
// Enforced: type (each, and lists of types); properties, required, additionalProperties (false,
// true, or a schema when there are no properties); enum, const; items, prefixItems (and draft 7's
// array form of items), minItems, maxItems; anyOf; oneOf whose branches cannot overlap (different
// types, or objects told apart by a const/enum property); allOf of object schemas (merged);
// $ref to "#", "#/$defs/..." or "#/definitions/..." (recursive too); string minLength, maxLength,
// pattern (regex.h), format (date, time, date-time, email, uuid, ipv4); integer minimum, maximum,
// exclusiveMinimum, exclusiveMaximum; the same for number with integral bounds.
// Ignored (annotations): title, description, $schema, $id, $comment, examples, default,
// deprecated, readOnly, writeOnly, $defs, definitions, and OpenAPI's nullable (no null is
// generated for it: JSON Schema validators do not read it).
// Anything else is InvalidArgument naming the keyword: a schema is never enforced partly.
//
// What the grammar generates is a subset of what the schema allows, chosen so that any validator
// agrees (Python's jsonschema, ajv with ajv-formats): properties appear in the schema's order, each
// once, and only the listed ones when there are any; strings escape only what JSON requires;
// dates skip February 29th; times carry a zone; numbers with bounds have no exponent; integers
// and fractions have at most 16 digits and exponents at most 2 (no parser rounds them to infinity).
// Whitespace between tokens follows llama.cpp's json-schema-to-grammar: none, one space, or a
// newline and up to 20 spaces or tabs (so a model cannot emit whitespace forever); none at all
// with `any_whitespace` false.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "grammar/grammar.h"

namespace tandem::grammar {

struct JsonSchemaOptions {
  bool any_whitespace = true;
  size_t max_schema_bytes = 1 << 20;  // a longer schema text is InvalidArgument
  int max_depth = 64;                 // nesting of subschemas (InvalidArgument beyond)
};

// `schema`: the schema's JSON text (object or boolean). InvalidArgument: not JSON, too large or
// deep, an unsupported keyword or format (named), a $ref that does not resolve, a schema no value
// can satisfy (false, an empty enum, minimum above maximum).
Result<Grammar> JsonSchemaToGrammar(std::string_view schema, const JsonSchemaOptions& options = {});

// Any JSON object ({"type": "json_object"}), with the same whitespace rules.
Grammar JsonObjectGrammar(const JsonSchemaOptions& options = {});

// Whether `value` nests arrays/objects deeper than `limit` (checked without recursion, so that a
// hostile document cannot overflow the stack; dump() and the converter recurse).
constexpr int kMaxJsonNesting = 256;
bool JsonNestedDeeperThan(const nlohmann::ordered_json& value, int limit);

}  // namespace tandem::grammar
