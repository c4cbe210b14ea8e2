#include "planner/prom_text.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace tandem::planner {
namespace {

bool NameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool NameChar(char c) { return NameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

// A float as Prometheus writes one: Go's ParseFloat syntax, which strtod accepts, plus "+Inf".
bool ParseValue(std::string_view s, double* out) {
  if (s == "+Inf" || s == "Inf") return *out = INFINITY, true;
  if (s == "-Inf") return *out = -INFINITY, true;
  if (s == "NaN") return *out = NAN, true;
  if (s.empty()) return false;
  const std::string copy(s);
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size() && errno != ERANGE && !std::isnan(*out) && !std::isinf(*out);
}

}  // namespace

Result<std::vector<PromSample>> ParsePromText(std::string_view text) {
  std::vector<PromSample> out;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t i = 0;
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size() || line[i] == '#') continue;
    auto bad = [&](const char* what) {
      return Err(StatusCode::kInvalidArgument, "line {}: {}: '{}'", line_no, what,
                 std::string(line.substr(0, 120)));
    };
    PromSample s;
    if (!NameStart(line[i])) return bad("a metric name must start with a letter, _ or :");
    const size_t name_start = i;
    while (i < line.size() && NameChar(line[i])) ++i;
    s.name = std::string(line.substr(name_start, i - name_start));
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (true) {
        while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
        if (i < line.size() && line[i] == '}') {
          ++i;
          break;
        }
        if (i >= line.size() || !NameStart(line[i]) || line[i] == ':') return bad("bad label name");
        const size_t ls = i;
        while (i < line.size() && NameChar(line[i]) && line[i] != ':') ++i;
        std::string label(line.substr(ls, i - ls));
        if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return bad("expected =\" after a label name");
        i += 2;
        std::string value;
        bool closed = false;
        while (i < line.size()) {
          const char c = line[i++];
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\' && i < line.size()) {
            const char e = line[i++];
            value += e == 'n' ? '\n' : e;  // \\ and \" stand for themselves
          } else {
            value += c;
          }
        }
        if (!closed) return bad("unterminated label value");
        if (!s.labels.emplace(std::move(label), std::move(value)).second) return bad("duplicate label");
      }
    }
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t ve = i;
    while (ve < line.size() && line[ve] != ' ' && line[ve] != '\t') ++ve;
    if (!ParseValue(line.substr(i, ve - i), &s.value)) return bad("the value is not a number");
    // An optional integer timestamp (milliseconds) may follow; the planner does not use it.
    out.push_back(std::move(s));
  }
  return out;
}

double SumSamples(const std::vector<PromSample>& samples, std::string_view name,
                  const std::map<std::string, std::string>& match) {
  double sum = 0;
  for (const PromSample& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok) sum += s.value;
  }
  return sum;
}

}  // namespace tandem::planner
