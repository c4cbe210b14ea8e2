#include "grammar/json_schema_parts.h"

#include <string>
#include <vector>

#include "grammar/regex.h"

namespace tandem::grammar::json_detail {

namespace {

// Numbers stay within what every JSON parser reads exactly: integers of at most 16 digits (int64),
// fractions of at most 16, exponents of at most 2 digits (no overflow to infinity).
constexpr int kMaxDigits = 16;
constexpr int kMaxExponentDigits = 2;

int Lit(Grammar& g, std::string s) { return g.Bytes(std::move(s)); }
int Digit(Grammar& g, char lo = '0', char hi = '9') {
  return g.CharClass({{static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)}}, false);
}

// Same-length decimal strings lo <= hi: every digit string between them.
int FixedRange(Grammar& g, const std::string& lo, const std::string& hi) {
  if (lo == hi) return Lit(g, lo);
  const size_t n = lo.size();
  if (lo[0] == hi[0]) return g.Sequence({Lit(g, lo.substr(0, 1)), FixedRange(g, lo.substr(1), hi.substr(1))});
  const std::string zeros(n - 1, '0'), nines(n - 1, '9');
  if (lo.substr(1) == zeros && hi.substr(1) == nines) {
    return n == 1 ? Digit(g, lo[0], hi[0]) : g.Sequence({Digit(g, lo[0], hi[0]), g.Repeat(Digit(g), static_cast<int>(n - 1), static_cast<int>(n - 1))});
  }
  std::vector<int> alts;
  alts.push_back(g.Sequence({Lit(g, lo.substr(0, 1)), FixedRange(g, lo.substr(1), nines)}));
  if (lo[0] + 1 <= hi[0] - 1) {
    alts.push_back(g.Sequence({Digit(g, static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)),
                               g.Repeat(Digit(g), static_cast<int>(n - 1), static_cast<int>(n - 1))}));
  }
  alts.push_back(g.Sequence({Lit(g, hi.substr(0, 1)), FixedRange(g, zeros, hi.substr(1))}));
  return g.Choice(std::move(alts));
}

// Non-negative integers in [a, b] (b absent: no bound), as decimal text without leading zeros.
int NonNegative(Grammar& g, uint64_t a, std::optional<uint64_t> b) {
  std::vector<int> alts;
  const size_t la = std::to_string(a).size();
  const size_t lb = b ? std::to_string(*b).size() : la;
  for (size_t len = la; len <= lb; ++len) {
    uint64_t lo = len == 1 ? 0 : 1;
    for (size_t k = 1; k < len; ++k) lo *= 10;  // 10^(len-1), or 0 for one digit
    std::string hi_s(len, '9');
    uint64_t lo_v = std::max<uint64_t>(a, lo);
    std::string lo_s = std::to_string(lo_v);
    if (b && len == lb) hi_s = std::to_string(*b);
    if (lo_s.size() != len || lo_s > hi_s) continue;
    alts.push_back(FixedRange(g, lo_s, hi_s));
  }
  if (!b && la < kMaxDigits) {  // every longer number, up to kMaxDigits digits
    alts.push_back(g.Sequence({Digit(g, '1', '9'), g.Repeat(Digit(g), static_cast<int>(la), kMaxDigits - 1)}));
  }
  return g.Choice(std::move(alts));
}

}  // namespace

JsonRules AddJsonRules(Grammar& g, bool any_whitespace) {
  JsonRules r;
  r.ws = g.RuleNamed("ws");
  g.SetBody(r.ws, any_whitespace
                      ? g.Repeat(g.Choice({Lit(g, " "), g.Sequence({Lit(g, "\n"), g.Repeat(g.CharClass({{' ', ' '}, {'\t', '\t'}}, false), 0, 20)})}), 0, 1)
                      : g.Empty());
  r.chr = g.RuleNamed("char");
  // \u escapes of surrogates are left out: a lone one is refused by some JSON parsers.
  const int hex = g.CharClass({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}, false);
  const int u_escape = g.Choice(
      {g.Sequence({g.CharClass({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}, false), g.Repeat(hex, 3, 3)}),
       g.Sequence({g.CharClass({{'d', 'd'}, {'D', 'D'}}, false), Digit(g, '0', '7'), g.Repeat(hex, 2, 2)})});
  g.SetBody(r.chr, g.Choice({g.CharClass({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true),
                             g.Sequence({Lit(g, "\\"), g.Choice({g.CharClass({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}, false),
                                                                 g.Sequence({Lit(g, "u"), u_escape})})})}));
  r.string = g.RuleNamed("string");
  g.SetBody(r.string, g.Sequence({Lit(g, "\""), g.Repeat(g.RuleRef(r.chr), 0, kUnbounded), Lit(g, "\"")}));
  r.integer = g.RuleNamed("integer");
  g.SetBody(r.integer, g.Sequence({g.Repeat(Lit(g, "-"), 0, 1), g.Choice({Lit(g, "0"), g.Sequence({Digit(g, '1', '9'), g.Repeat(Digit(g), 0, kMaxDigits - 1)})})}));
  r.number = g.RuleNamed("number");
  g.SetBody(r.number, g.Sequence({g.RuleRef(r.integer),
                                  g.Repeat(g.Sequence({Lit(g, "."), g.Repeat(Digit(g), 1, kMaxDigits)}), 0, 1),
                                  g.Repeat(g.Sequence({g.CharClass({{'e', 'e'}, {'E', 'E'}}, false), g.Repeat(g.CharClass({{'+', '+'}, {'-', '-'}}, false), 0, 1), g.Repeat(Digit(g), 1, kMaxExponentDigits)}), 0, 1)}));
  r.value = g.RuleNamed("value");
  r.object = g.RuleNamed("object");
  r.array = g.RuleNamed("array");
  const int ws = g.RuleRef(r.ws);
  g.SetBody(r.value, g.Choice({g.RuleRef(r.object), g.RuleRef(r.array), g.RuleRef(r.string), g.RuleRef(r.number),
                               Lit(g, "true"), Lit(g, "false"), Lit(g, "null")}));
  const int member = g.Sequence({g.RuleRef(r.string), ws, Lit(g, ":"), ws, g.RuleRef(r.value)});
  g.SetBody(r.object, g.Sequence({Lit(g, "{"), ws, g.Repeat(g.Sequence({member, g.Repeat(g.Sequence({ws, Lit(g, ","), ws, member}), 0, kUnbounded), ws}), 0, 1), Lit(g, "}")}));
  g.SetBody(r.array, g.Sequence({Lit(g, "["), ws, g.Repeat(g.Sequence({g.RuleRef(r.value), g.Repeat(g.Sequence({ws, Lit(g, ","), ws, g.RuleRef(r.value)}), 0, kUnbounded), ws}), 0, 1), Lit(g, "]")}));
  return r;
}

Result<int> IntegerRange(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) return Err(StatusCode::kInvalidArgument, "integer range [{}, {}] is empty", *lo, *hi);
  auto mag = [](int64_t v) { return v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v); };
  std::vector<int> alts;
  // Negative part: -k for k in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t k_lo = hi && *hi < 0 ? mag(*hi) : 1;
    std::optional<uint64_t> k_hi;
    if (lo) k_hi = mag(*lo);
    alts.push_back(g.Sequence({Lit(g, "-"), NonNegative(g, k_lo, k_hi)}));
  }
  if (!hi || *hi >= 0) {
    const uint64_t a = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    std::optional<uint64_t> b;
    if (hi) b = static_cast<uint64_t>(*hi);
    alts.push_back(NonNegative(g, a, b));
  }
  return g.Choice(std::move(alts));
}

Result<int> NumberRange(Grammar& g, const JsonRules& rules, std::optional<int64_t> lo,
                        bool lo_exclusive, std::optional<int64_t> hi, bool hi_exclusive) {
  if (!lo && !hi) return g.RuleRef(rules.number);
  std::vector<int> alts;
  // Integers.
  std::optional<int64_t> wlo = lo, whi = hi;
  if (wlo && lo_exclusive) ++*wlo;
  if (whi && hi_exclusive) --*whi;
  if (!wlo || !whi || *wlo <= *whi) {
    TANDEM_ASSIGN_OR_RETURN(int whole, IntegerRange(g, wlo, whi));
    alts.push_back(whole);
  }
  // Decimals with a non-zero fraction lie strictly between two integers: "i.f" (i >= 0) in
  // (i, i + 1) and "-k.f" (k >= 0) in (-k - 1, -k).
  const int frac = g.Sequence({Lit(g, "."), g.Repeat(Digit(g), 0, kMaxDigits - 1), Digit(g, '1', '9')});
  std::optional<int64_t> ilo = lo ? std::max<int64_t>(*lo, 0) : 0, ihi;
  if (hi) ihi = *hi - 1;
  if (!ihi || *ilo <= *ihi) {
    TANDEM_ASSIGN_OR_RETURN(int i, IntegerRange(g, ilo, ihi));
    alts.push_back(g.Sequence({i, frac}));
  }
  std::optional<int64_t> klo = hi ? std::max<int64_t>(-*hi, 0) : 0, khi;
  if (lo) khi = -*lo - 1;
  if (!khi || *klo <= *khi) {
    TANDEM_ASSIGN_OR_RETURN(int k, IntegerRange(g, klo, khi));
    alts.push_back(g.Sequence({Lit(g, "-"), k, frac}));
  }
  if (alts.empty()) return Status(StatusCode::kInvalidArgument, "no number satisfies the bounds");
  return g.Choice(std::move(alts));
}

Result<int> FormatContent(Grammar& g, std::string_view format) {
  // Days per month without February 29th (no leap-year arithmetic in a grammar).
  static constexpr const char* kDate =
      "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
      "|02-(?:0[1-9]|1[0-9]|2[0-8]))";
  static constexpr const char* kTime = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?"
                                       "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
  std::string pattern;
  if (format == "date") {
    pattern = kDate;
  } else if (format == "time") {
    pattern = kTime;
  } else if (format == "date-time") {
    pattern = std::string(kDate) + "T" + kTime;
  } else if (format == "email") {
    pattern = "[a-z0-9]+(?:[._-][a-z0-9]+)*@[a-z0-9]+(?:-[a-z0-9]+)*(?:\\.[a-z0-9]+(?:-[a-z0-9]+)*)*\\.[a-z]{2,6}";
  } else if (format == "uuid") {
    pattern = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  } else if (format == "ipv4") {
    pattern = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?:\\.(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}";
  } else {
    return Err(StatusCode::kInvalidArgument,
               "string format '{}' is not supported (supported: date, time, date-time, email, uuid, ipv4)",
               format);
  }
  return RegexToExpr(pattern, g);
}

int JsonStringSafe(Grammar& g, int expr) {
  const Expr e = g.expr(expr);  // a copy: g grows below
  switch (e.kind) {
    case ExprKind::kEmpty:
    case ExprKind::kRuleRef:
      return expr;
    case ExprKind::kBytes: {
      std::string out;
      for (unsigned char c : e.bytes) {
        if (c == '"' || c == '\\') {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20) {
          static const char* kHex = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
      }
      return g.Bytes(std::move(out));
    }
    case ExprKind::kCharClass: {
      // The class's code points minus the ones JSON must escape.
      std::vector<CodepointRange> out;
      for (CodepointRange r : ClassCodepoints(e)) {
        if (r.hi < 0x20) continue;
        r.lo = std::max<uint32_t>(r.lo, 0x20);
        for (uint32_t cut : {static_cast<uint32_t>('"'), static_cast<uint32_t>('\\')}) {
          if (r.lo <= cut && cut <= r.hi) {
            if (cut > r.lo) out.push_back({r.lo, cut - 1});
            r.lo = cut + 1;
          }
        }
        if (r.lo <= r.hi) out.push_back(r);
      }
      return g.CharClass(std::move(out), false);
    }
    case ExprKind::kSequence:
    case ExprKind::kChoice: {
      std::vector<int> kids;
      for (int c : e.children) kids.push_back(JsonStringSafe(g, c));
      return e.kind == ExprKind::kSequence ? g.Sequence(std::move(kids)) : g.Choice(std::move(kids));
    }
    case ExprKind::kRepeat:
      return g.Repeat(JsonStringSafe(g, e.children[0]), e.min, e.max);
  }
  return expr;
}

}  // namespace tandem::grammar::json_detail
