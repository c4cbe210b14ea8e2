// Structured outputs as requests name them: what the OpenAI API's response_format and vLLM's
// guided_* / structured_outputs parameters ask for, compiled to an automaton (automaton.h) once
// and cached.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "grammar/automaton.h"

namespace tandem::grammar {

enum class StructuredKind : uint8_t {
  kNone = 0,
  kJsonObject = 1,  // any JSON object (response_format {"type": "json_object"})
  kJsonSchema = 2,  // spec: the schema's JSON text (json_schema.h)
  kRegex = 3,       // spec: a regular expression, fully matched (regex.h)
  kChoice = 4,      // spec: a JSON array of strings; the output is exactly one of them
  kGrammar = 5,     // spec: GBNF text, root rule "root" (grammar.h)
};

struct StructuredOutputSpec {
  StructuredKind kind = StructuredKind::kNone;
  std::string spec;
  bool any_whitespace = true;  // JSON kinds: whitespace between tokens (json_schema.h)
  bool operator==(const StructuredOutputSpec&) const = default;
};

// The spec's name in errors and logs ("json_schema", "regex", ...).
const char* KindName(StructuredKind kind);

// Compiles one spec. InvalidArgument saying what is wrong (the JSON Schema keyword, the regex
// offset, the GBNF line) and which parameter it came from.
Result<std::shared_ptr<const Automaton>> CompileStructuredOutput(const StructuredOutputSpec& spec);

// A thread-safe cache of compiled specs, least recently used dropped beyond `capacity`; failures
// are not cached.
class StructuredOutputCache {
 public:
  explicit StructuredOutputCache(size_t capacity = 256) : capacity_(capacity) {}
  Result<std::shared_ptr<const Automaton>> Get(const StructuredOutputSpec& spec);
  size_t size() const;

 private:
  using Key = std::string;
  static Key KeyOf(const StructuredOutputSpec& spec);
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<Key> order_;  // most recent first
  std::unordered_map<Key, std::pair<std::shared_ptr<const Automaton>, std::list<Key>::iterator>> map_;
};

}  // namespace tandem::grammar
