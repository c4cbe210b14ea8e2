// Pieces of JSON text as grammar expressions, for json_schema.cc: the common rules, integer and
// number ranges, string formats, and regular expressions restricted to JSON string content.
// Internal to src/grammar.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/status.h"
#include "grammar/grammar.h"

namespace tandem::grammar::json_detail {

// Rules made once per grammar (rule numbers; reference them with Grammar::RuleRef).
struct JsonRules {
  int ws = -1;       // whitespace between tokens (json_schema.h)
  int chr = -1;      // one character of a string's content, escaped as JSON allows
  int string = -1;   // "..."
  int number = -1;   // RFC 8259 number
  int integer = -1;  // -?(0|[1-9][0-9]*)
  int value = -1;    // any JSON value
  int object = -1;   // any JSON object
  int array = -1;    // any JSON array
};
JsonRules AddJsonRules(Grammar& g, bool any_whitespace);

// The text of the JSON integers in [lo, hi] (no bound where absent); no leading zeros, no "-0".
// InvalidArgument when lo > hi.
Result<int> IntegerRange(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi);

// JSON numbers between integral bounds (each inclusive or exclusive; absent: none), without
// exponents: the integers in range, and decimals with a non-zero fraction between two integers
// of the range (a subset of the range's numbers). InvalidArgument when no number satisfies them.
Result<int> NumberRange(Grammar& g, const JsonRules& rules, std::optional<int64_t> lo,
                        bool lo_exclusive, std::optional<int64_t> hi, bool hi_exclusive);

// A string format's content (no quotes): date, time, date-time, email, uuid, ipv4; InvalidArgument
// naming any other.
Result<int> FormatContent(Grammar& g, std::string_view format);

// `expr` (of regex.h, over decoded text) as JSON string content: quotes, backslashes and control
// characters in literals escaped; character classes lose those characters (a subset).
int JsonStringSafe(Grammar& g, int expr);

}  // namespace tandem::grammar::json_detail
