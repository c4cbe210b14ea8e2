#include "grammar/grammar.h"

#include <algorithm>

#include <fmt/format.h>

namespace tandem::grammar {

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t DecodeUtf8(std::string_view s, size_t pos, uint32_t* cp) {
  if (pos >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[pos]);
  const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || pos + len > s.size()) return 0;
  uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < len; ++k) {
    const auto d = static_cast<unsigned char>(s[pos + k]);
    if ((d & 0xC0) != 0x80) return 0;
    v = (v << 6) | (d & 0x3F);
  }
  *cp = v;
  return len;
}

std::vector<CodepointRange> ComplementRanges(std::vector<CodepointRange> ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodepointRange& a, const CodepointRange& b) { return a.lo < b.lo; });
  std::vector<CodepointRange> out;
  uint32_t next = 0;
  for (const CodepointRange& r : ranges) {
    if (r.hi < next) continue;
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return out;
}

std::vector<CodepointRange> ClassCodepoints(const Expr& e) {
  return e.negated ? ComplementRanges(e.ranges) : e.ranges;
}

int Grammar::Add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<int>(exprs_.size()) - 1;
}

int Grammar::Empty() { return Add(Expr{}); }

int Grammar::Bytes(std::string bytes) {
  Expr e;
  e.kind = bytes.empty() ? ExprKind::kEmpty : ExprKind::kBytes;
  e.bytes = std::move(bytes);
  return Add(std::move(e));
}

int Grammar::CharClass(std::vector<CodepointRange> ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodepointRange& a, const CodepointRange& b) { return a.lo < b.lo; });
  std::vector<CodepointRange> merged;
  for (const CodepointRange& r : ranges) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  Expr e;
  e.kind = ExprKind::kCharClass;
  e.ranges = std::move(merged);
  e.negated = negated;
  return Add(std::move(e));
}

int Grammar::Sequence(std::vector<int> children) {
  if (children.empty()) return Empty();
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kSequence;
  e.children = std::move(children);
  return Add(std::move(e));
}

int Grammar::Choice(std::vector<int> children) {
  if (children.size() == 1) return children[0];
  Expr e;
  e.kind = ExprKind::kChoice;
  e.children = std::move(children);
  return Add(std::move(e));
}

int Grammar::Repeat(int child, int min, int max) {
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return Add(std::move(e));
}

int Grammar::RuleRef(int rule) {
  Expr e;
  e.kind = ExprKind::kRuleRef;
  e.rule = rule;
  return Add(std::move(e));
}

int Grammar::RuleNamed(std::string_view name) {
  int found = FindRule(name);
  if (found >= 0) return found;
  rules_.push_back(Rule{std::string(name), -1});
  const int r = static_cast<int>(rules_.size()) - 1;
  rule_index_.emplace(rules_.back().name, r);
  return r;
}

int Grammar::FindRule(std::string_view name) const {
  const auto it = rule_index_.find(std::string(name));
  return it == rule_index_.end() ? -1 : it->second;
}

Status Grammar::Validate() const {
  if (root_ < 0 || root_ >= static_cast<int>(rules_.size())) {
    return Status(StatusCode::kInvalidArgument, "the grammar has no root rule");
  }
  for (const Rule& r : rules_) {
    if (r.body < 0) return Err(StatusCode::kInvalidArgument, "rule '{}' is used but not defined", r.name);
  }
  for (const Expr& e : exprs_) {
    if (e.kind == ExprKind::kRepeat && (e.min < 0 || (e.max != kUnbounded && e.max < e.min))) {
      return Err(StatusCode::kInvalidArgument, "bad repetition {{{},{}}}", e.min, e.max);
    }
  }
  return Status::Ok();
}

namespace {

std::string EscapeChar(uint32_t cp, bool in_class) {
  switch (cp) {
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\\': return "\\\\";
    case '"': return in_class ? "\"" : "\\\"";
    case ']': return in_class ? "\\]" : "]";
    case '-': return in_class ? "\\-" : "-";
    case '^': return in_class ? "\\^" : "^";
    default: break;
  }
  if (cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return cp < 0x10000 ? fmt::format("\\u{:04X}", cp) : fmt::format("\\U{:08X}", cp);
}

void Write(const Grammar& g, int i, std::string& out) {
  const Expr& e = g.expr(i);
  switch (e.kind) {
    case ExprKind::kEmpty:
      out += "\"\"";
      return;
    case ExprKind::kBytes:
      out += '"';
      for (unsigned char c : e.bytes) {
        out += c >= 0x80 ? std::string(1, static_cast<char>(c)) : EscapeChar(c, false);  // UTF-8 as is
      }
      out += '"';
      return;
    case ExprKind::kCharClass:
      out += e.negated ? "[^" : "[";
      for (const CodepointRange& r : e.ranges) {
        out += EscapeChar(r.lo, true);
        if (r.hi != r.lo) out += "-" + EscapeChar(r.hi, true);
      }
      out += ']';
      return;
    case ExprKind::kSequence:
    case ExprKind::kChoice:
      out += '(';
      for (size_t k = 0; k < e.children.size(); ++k) {
        if (k) out += e.kind == ExprKind::kChoice ? " | " : " ";
        Write(g, e.children[k], out);
      }
      out += ')';
      return;
    case ExprKind::kRepeat:
      out += '(';
      Write(g, e.children[0], out);
      out += e.max == kUnbounded ? fmt::format("){{{},}}", e.min) : fmt::format("){{{},{}}}", e.min, e.max);
      return;
    case ExprKind::kRuleRef:
      out += g.rule(e.rule).name;
      return;
  }
}

}  // namespace

std::string Grammar::ToGbnf() const {
  std::string out;
  for (const Rule& r : rules_) {
    out += r.name + " ::= ";
    if (r.body >= 0) Write(*this, r.body, out);
    out += '\n';
  }
  return out;
}

}  // namespace tandem::grammar
