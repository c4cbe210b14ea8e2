// Grammar: the intermediate form every structured-output constraint compiles to (a GBNF grammar
// as written, and later JSON Schema and regular expressions), before the byte-level pushdown
// automaton of automaton.h.
//
// A grammar is a list of named rules; each rule's body is one expression over Unicode text:
//   literal bytes ("..."), a character class ([a-z], [^"\\], the "." of any character),
//   a sequence, alternatives, a repetition {min,max} (max -1: unbounded; *, +, ? are {0,-1},
//   {1,-1}, {0,1}) and a reference to a rule. Text is UTF-8; a class matches one code point.
//
// ParseGbnf reads llama.cpp's GBNF notation (grammars/README.md of llama.cpp):
//   root   ::= object
//   object ::= "{" ws ( pair ( "," ws pair )* )? "}"
//   # a comment; rules end at a newline not inside ( ) or a line ending in | ;
//   literals "..." and classes [...] take \n \r \t \\ \" \] \xHH \uHHHH \UHHHHHHHH escapes;
//   x{m}, x{m,}, x{m,n} repeat.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace tandem::grammar {

// A closed range of Unicode code points.
struct CodepointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
  bool operator==(const CodepointRange&) const = default;
};

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr int kUnbounded = -1;

enum class ExprKind : uint8_t {
  kEmpty,      // matches ""
  kBytes,      // `bytes`, literally
  kCharClass,  // one code point in `ranges` (sorted, disjoint), or not in them when `negated`
  kSequence,   // `children` one after another
  kChoice,     // one of `children`
  kRepeat,     // children[0], between `min` and `max` times (max kUnbounded: no bound)
  kRuleRef,    // rule number `rule`
};

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  std::string bytes;
  std::vector<CodepointRange> ranges;
  bool negated = false;
  std::vector<int> children;  // indexes into Grammar::exprs
  int min = 0;
  int max = 0;
  int rule = -1;
};

struct Rule {
  std::string name;
  int body = -1;  // index into Grammar::exprs
};

class Grammar {
 public:
  // Builders (expression indexes are returned; children must exist already).
  int Empty();
  int Bytes(std::string bytes);
  int CharClass(std::vector<CodepointRange> ranges, bool negated);  // sorts and merges ranges
  int Sequence(std::vector<int> children);
  int Choice(std::vector<int> children);
  int Repeat(int child, int min, int max);
  int RuleRef(int rule);
  // A rule by name: its number, made (without a body) when new.
  int RuleNamed(std::string_view name);
  void SetBody(int rule, int expr) { rules_[rule].body = expr; }

  // InvalidArgument naming the first rule without a body, or a root out of range.
  Status Validate() const;

  const std::vector<Expr>& exprs() const { return exprs_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const Expr& expr(int i) const { return exprs_[i]; }
  const Rule& rule(int i) const { return rules_[i]; }
  int root() const { return root_; }
  void set_root(int rule) { root_ = rule; }
  int FindRule(std::string_view name) const;  // -1 when absent

  // GBNF text of the grammar (for logs and tests; ParseGbnf reads it back to the same language).
  std::string ToGbnf() const;

 private:
  int Add(Expr e);
  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  // Rule number by name (a GBNF of n rules names them O(n) times; a linear search made parsing a
  // large hostile grammar quadratic).
  std::unordered_map<std::string, int> rule_index_;
  int root_ = -1;
};

// Parses GBNF (see the top of this file); `root` names the start rule. InvalidArgument with the
// line and column for a syntax error, an undefined rule or a missing root.
Result<Grammar> ParseGbnf(std::string_view text, std::string_view root = "root");

// Appends the UTF-8 encoding of code point `cp` (<= kMaxCodepoint) to `out`.
void AppendUtf8(uint32_t cp, std::string& out);
// Decodes the UTF-8 code point at s[pos]: its length in bytes (*cp set), 0 when the bytes there are
// not a well-formed sequence (RFC 3629's lead and continuation bytes; overlong forms not checked).
size_t DecodeUtf8(std::string_view s, size_t pos, uint32_t* cp);

// The code points not in `ranges` (any order, may overlap) within [0, kMaxCodepoint], sorted.
std::vector<CodepointRange> ComplementRanges(std::vector<CodepointRange> ranges);
// The code points a kCharClass expression matches: its ranges, or their complement if negated.
std::vector<CodepointRange> ClassCodepoints(const Expr& e);

}  // namespace tandem::grammar
