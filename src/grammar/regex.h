// Regular expressions to grammar expressions (grammar.h), for `guided_regex` and JSON Schema's
// `pattern` and formats. The syntax is the ECMA-262 subset JSON Schema recommends for `pattern`
// (json-schema.org, "Regular Expressions" in the Understanding JSON Schema guide) and that
// vLLM/SGLang users write:
//   literals and escapes \n \r \t \f \v \0 \xHH \uHHHH \u{...} \/ and escaped metacharacters;
//   . (any character but \n and \r); classes [...], [^...] with ranges and \d \w \s \D \W \S;
//   groups ( ), (?: ), (?<name> ); alternation |; quantifiers * + ? {n} {n,} {n,m}, each also
//   lazy (a trailing ?: the same language); ^ at the start and $ at the end.
// Unsupported (InvalidArgument naming it): backreferences, lookaround, \b \B, anchors elsewhere,
// flags groups, possessive quantifiers, \p{...} classes.
//
// The expression matches the whole string (full match, as `guided_regex` and strict outputs
// need). JSON Schema's `pattern` is unanchored (a match anywhere): JsonSchemaToGrammar wraps it
// in `.*` on the sides without a ^ / $ itself (see json_schema.h).
#pragma once

#include <string_view>

#include "common/status.h"
#include "grammar/grammar.h"

namespace tandem::grammar {

struct RegexInfo {
  bool anchored_start = false;  // the pattern began with ^
  bool anchored_end = false;    // ... ended with $
};

// Adds the expression for `pattern` to `g`; its index. `info` (optional) says which anchors it had.
Result<int> RegexToExpr(std::string_view pattern, Grammar& g, RegexInfo* info = nullptr);

// A grammar whose root matches exactly the strings `pattern` fully matches.
Result<Grammar> RegexToGrammar(std::string_view pattern);

}  // namespace tandem::grammar
