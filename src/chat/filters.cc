// Filters and tests: jinja2's built-ins that chat templates use, plus transformers' tojson
// (json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)).
#include <algorithm>
#include <cmath>
#include <functional>

#include "chat/eval.h"
#include "chat/text.h"

namespace tandem::chat {
namespace {

using FilterFn = std::function<Value(Evaluator&, const Value&, CallArgs&)>;
using TestFn = std::function<bool(const Value&, CallArgs&)>;

int64_t Len(const Value& v) {
  switch (v.type) {
    case Value::Type::kString: return static_cast<int64_t>(Utf8Length(v.str()));
    case Value::Type::kList: return static_cast<int64_t>(v.list->size());
    case Value::Type::kDict: return static_cast<int64_t>(v.dict->items.size());
    case Value::Type::kUndefined: return 0;
    default: throw TemplateError(std::string("object of type '") + v.TypeName() + "' has no len()");
  }
}

// Dotted attribute lookup as jinja2's make_attrgetter ("a.b" and "0").
Value AttrPath(const Value& item, const std::string& path) {
  Value cur = item;
  size_t b = 0;
  while (true) {
    size_t e = path.find('.', b);
    std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = GetItem(cur, digits ? Value::Int(std::stoll(part)) : Value::Str(part));
    if (e == std::string::npos) return cur;
    b = e + 1;
  }
}

Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::Str(PyLower(v.str()));
  return v;
}

std::string AttrArg(const CallArgs& a, size_t index) {
  const Value* v = a.Get(index, "attribute");
  if (!v || v->is_none()) return {};
  return PyStr(*v);
}

Value FirstLast(const Value& v, bool last) {
  if (v.is_undefined()) return Value::Undefined("No first item, sequence was empty.");
  ValueList items = Iterate(v);
  if (items.empty()) return Value::Undefined(last ? "No last item, sequence was empty." : "No first item, sequence was empty.");
  return last ? items.back() : items.front();
}

Value Round(const Value& v, CallArgs& a) {
  int64_t precision = a.GetOr(0, "precision", Value::Int(0)).as_int();
  std::string method = PyStr(a.GetOr(1, "method", Value::Str("common")));
  if (!v.is_number()) throw TemplateError(std::string("round: expected a number, got ") + v.TypeName());
  if (method == "common") {
    if (v.is_integral()) return Value::Int(v.as_int());  // Python round(int, n) stays an int
    if (precision == 0) return Value::Float(std::nearbyint(v.f));
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), v.f);
    return Value::Float(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  if (method == "floor") return Value::Float(std::floor(x) / scale);
  if (method == "ceil") return Value::Float(std::ceil(x) / scale);
  throw TemplateError("method must be common, ceil or floor");
}

Value ToInt(const Value& v, CallArgs& a) {
  Value fallback = a.GetOr(0, "default", Value::Int(0));
  int64_t base = a.GetOr(1, "base", Value::Int(10)).as_int();
  if (v.is_integral()) return Value::Int(v.as_int());
  if (v.type == Value::Type::kFloat) return std::isfinite(v.f) ? Value::Int(static_cast<int64_t>(v.f)) : fallback;
  if (v.is_string()) {
    std::string s = PyStrip(v.str(), std::nullopt, true, true);
    std::string clean;
    for (char c : s)
      if (c != '_') clean.push_back(c);
    try {
      size_t used = 0;
      long long r = std::stoll(clean, &used, static_cast<int>(base));
      if (used == clean.size() && !clean.empty()) return Value::Int(r);
    } catch (...) {
    }
    try {
      size_t used = 0;
      double d = std::stod(clean, &used);
      if (used == clean.size() && std::isfinite(d)) return Value::Int(static_cast<int64_t>(d));
    } catch (...) {
    }
  }
  return fallback;
}

Value ToFloat(const Value& v, CallArgs& a) {
  Value fallback = a.GetOr(0, "default", Value::Float(0.0));
  if (v.is_number()) return Value::Float(v.as_double());
  if (v.is_string()) {
    std::string s = PyStrip(v.str(), std::nullopt, true, true);
    try {
      size_t used = 0;
      double d = std::stod(s, &used);
      if (used == s.size()) return Value::Float(d);
    } catch (...) {
    }
  }
  return fallback;
}

Value ToJson(const Value& v, CallArgs& a) {
  JsonDumpOptions o;
  o.ensure_ascii = Truthy(a.GetOr(0, "ensure_ascii", Value::Bool(false)));
  Value indent = a.GetOr(1, "indent", Value::None());
  if (indent.is_integral()) {
    o.has_indent = true;
    CheckStringSize(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), "tojson's indent");
    o.indent = std::string(std::max<int64_t>(0, indent.as_int()), ' ');
  } else if (indent.is_string()) {
    o.has_indent = true;
    o.indent = indent.str();
  } else if (!indent.is_none()) {
    throw TemplateError("tojson: indent must be an int, a string or None");
  }
  if (o.has_indent) o.item_separator = ",";
  Value seps = a.GetOr(2, "separators", Value::None());
  if (seps.is_list()) {
    if (seps.list->size() != 2) throw TemplateError("tojson: separators must be a pair");
    o.item_separator = PyStr((*seps.list)[0]);
    o.key_separator = PyStr((*seps.list)[1]);
  }
  o.sort_keys = Truthy(a.GetOr(3, "sort_keys", Value::Bool(false)));
  return Value::Str(JsonDumps(v, o));
}

// jinja2's title filter: capitalizes the first character of each word, words starting after
// whitespace, '-', '(', '{', '[' or '<'.
std::string JinjaTitle(const std::string& s) {
  std::u32string u = Utf8Decode(s);
  bool start = true;
  for (char32_t& c : u) {
    bool sep = IsPySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      start = true;
      continue;
    }
    c = start ? ToUpperCp(c) : ToLowerCp(c);
    start = false;
  }
  return Utf8Encode(u);
}

Value SelectReject(const Value& seq, CallArgs& a, bool by_attr, bool select) {
  size_t next = 0;
  std::string attr;
  if (by_attr) attr = PyStr(a.GetOr(next++, "attr", Value::Str("")));
  std::string test;
  if (next < a.pos.size()) test = PyStr(a.pos[next++]);
  CallArgs targs;
  targs.line = a.line;
  targs.pos.assign(a.pos.begin() + std::min(next, a.pos.size()), a.pos.end());
  ValueList out;
  for (const auto& item : Iterate(seq)) {
    Value x = by_attr ? AttrPath(item, attr) : item;
    bool r = test.empty() ? Truthy(x) : ApplyTest(test, x, targs);
    if (r == select) out.push_back(item);
  }
  return Value::List(std::move(out));
}

Value Map(Evaluator& ev, const Value& seq, CallArgs& a) {
  ValueList out;
  if (a.pos.empty()) {
    std::string attr = AttrArg(a, 99);
    const Value* fallback = a.Get(99, "default");
    for (const auto& item : Iterate(seq)) {
      Value x = AttrPath(item, attr);
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::List(std::move(out));
  }
  std::string filter = PyStr(a.pos[0]);
  if (!IsKnownFilter(filter)) throw TemplateError("unsupported filter '" + filter + "'");
  CallArgs fargs;
  fargs.line = a.line;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const auto& item : Iterate(seq)) out.push_back(ApplyFilter(ev, filter, item, fargs));
  return Value::List(std::move(out));
}

Value SortLike(const Value& seq, CallArgs& a, int kind) {  // 0 sort, 1 unique, 2 min, 3 max
  bool reverse = kind == 0 && Truthy(a.GetOr(0, "reverse", Value::Bool(false)));
  bool case_sensitive = Truthy(a.GetOr(kind == 0 ? 1 : 0, "case_sensitive", Value::Bool(false)));
  std::string attr = AttrArg(a, kind == 0 ? 2 : 1);
  ValueList items = Iterate(seq);
  auto key = [&](const Value& v) { return SortKey(attr.empty() ? v : AttrPath(v, attr), case_sensitive); };
  if (kind == 1) {
    ValueList out, seen;
    for (const auto& item : items) {
      Value k = key(item);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, k); })) {
        seen.push_back(k);
        out.push_back(item);
      }
    }
    return Value::List(std::move(out));
  }
  if (kind >= 2) {
    if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t k = 1; k < items.size(); ++k) {
      bool better = kind == 2 ? Less(key(items[k]), key(items[best])) : Less(key(items[best]), key(items[k]));
      if (better) best = k;
    }
    return items[best];
  }
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? Less(key(y), key(x)) : Less(key(x), key(y));
  });
  return Value::List(std::move(items));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value Indent(const Value& v, CallArgs& a) {
  Value width = a.GetOr(0, "width", Value::Int(4));
  if (!width.is_string()) CheckStringSize(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), "indent");
  std::string ind = width.is_string() ? width.str() : std::string(std::max<int64_t>(0, width.as_int()), ' ');
  bool first = Truthy(a.GetOr(1, "first", Value::Bool(false)));
  bool blank = Truthy(a.GetOr(2, "blank", Value::Bool(false)));
  std::vector<std::string> lines = PySplitLines(PyStr(v) + "\n", false);
  std::string rv;
  CheckStringSize(ind.size(), "indent");
  for (size_t k = 0; k < lines.size(); ++k) {
    if (k) rv += "\n";
    if (k && (blank || !lines[k].empty())) rv += ind;
    rv += lines[k];
    CheckStringSize(rv.size(), "indent");
  }
  if (first) rv = ind + rv;
  return Value::Str(std::move(rv));
}

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string, FilterFn>{
      {"tojson", [](Evaluator&, const Value& v, CallArgs& a) { return ToJson(v, a); }},
      {"trim", [](Evaluator&, const Value& v, CallArgs& a) {
         const Value* c = a.Get(0, "chars");
         std::optional<std::string> chars;
         if (c && !c->is_none()) chars = PyStr(*c);
         return Value::Str(PyStrip(PyStr(v), chars, true, true));
       }},
      {"length", [](Evaluator&, const Value& v, CallArgs&) { return Value::Int(Len(v)); }},
      {"count", [](Evaluator&, const Value& v, CallArgs&) { return Value::Int(Len(v)); }},
      {"lower", [](Evaluator&, const Value& v, CallArgs&) { return Value::Str(PyLower(PyStr(v))); }},
      {"upper", [](Evaluator&, const Value& v, CallArgs&) { return Value::Str(PyUpper(PyStr(v))); }},
      {"title", [](Evaluator&, const Value& v, CallArgs&) { return Value::Str(JinjaTitle(PyStr(v))); }},
      {"capitalize", [](Evaluator&, const Value& v, CallArgs&) { return Value::Str(PyCapitalize(PyStr(v))); }},
      {"default", [](Evaluator&, const Value& v, CallArgs& a) {
         bool boolean = Truthy(a.GetOr(1, "boolean", Value::Bool(false)));
         if (v.is_undefined() || (boolean && !Truthy(v))) return a.GetOr(0, "default_value", Value::Str(""));
         return v;
       }},
      {"join", [](Evaluator&, const Value& v, CallArgs& a) {
         std::string sep = PyStr(a.GetOr(0, "d", Value::Str("")));
         std::string attr = AttrArg(a, 1);
         std::string out;
         if (v.is_string() && attr.empty()) {
           // The characters of a string, without a Value per character; the size known up front.
           const std::u32string u = Utf8Decode(v.str());
           if (!u.empty()) CheckStringSize(v.str().size() + (u.size() - 1) * sep.size(), "join");
           for (size_t k = 0; k < u.size(); ++k) {
             if (k) out += sep;
             AppendUtf8(out, u[k]);
           }
           return Value::Str(std::move(out));
         }
         bool first = true;
         for (const auto& item : Iterate(v)) {
           if (!first) out += sep;
           first = false;
           out += PyStr(attr.empty() ? item : AttrPath(item, attr));
           CheckStringSize(out.size(), "join");
         }
         return Value::Str(std::move(out));
       }},
      {"first", [](Evaluator&, const Value& v, CallArgs&) { return FirstLast(v, false); }},
      {"last", [](Evaluator&, const Value& v, CallArgs&) { return FirstLast(v, true); }},
      {"list", [](Evaluator&, const Value& v, CallArgs&) { return Value::List(Iterate(v)); }},
      {"items", [](Evaluator&, const Value& v, CallArgs&) {
         if (v.is_undefined()) return Value::List();
         if (!v.is_dict()) throw TemplateError("can only get item pairs from a mapping");
         ValueList out;
         for (const auto& [k, x] : v.dict->items) out.push_back(Value::List({k, x}, true));
         return Value::List(std::move(out));
       }},
      {"string", [](Evaluator&, const Value& v, CallArgs&) { return Value::Str(PyStr(v)); }},
      {"int", [](Evaluator&, const Value& v, CallArgs& a) { return ToInt(v, a); }},
      {"float", [](Evaluator&, const Value& v, CallArgs& a) { return ToFloat(v, a); }},
      {"replace", [](Evaluator&, const Value& v, CallArgs& a) {
         return Value::Str(PyReplace(PyStr(v), PyStr(a.GetOr(0, "old", Value::Str(""))),
                                     PyStr(a.GetOr(1, "new", Value::Str(""))),
                                     a.GetOr(2, "count", Value::Int(-1)).is_integral()
                                         ? a.GetOr(2, "count", Value::Int(-1)).as_int() : -1,
                                     Limits().max_string_bytes));
       }},
      {"selectattr", [](Evaluator&, const Value& v, CallArgs& a) { return SelectReject(v, a, true, true); }},
      {"rejectattr", [](Evaluator&, const Value& v, CallArgs& a) { return SelectReject(v, a, true, false); }},
      {"select", [](Evaluator&, const Value& v, CallArgs& a) { return SelectReject(v, a, false, true); }},
      {"reject", [](Evaluator&, const Value& v, CallArgs& a) { return SelectReject(v, a, false, false); }},
      {"map", [](Evaluator& ev, const Value& v, CallArgs& a) { return Map(ev, v, a); }},
      {"safe", [](Evaluator&, const Value& v, CallArgs&) { return v; }},
      {"e", [](Evaluator&, const Value& v, CallArgs&) { return Value::Str(HtmlEscape(PyStr(v))); }},
      {"escape", [](Evaluator&, const Value& v, CallArgs&) { return Value::Str(HtmlEscape(PyStr(v))); }},
      {"dictsort", [](Evaluator&, const Value& v, CallArgs& a) {
         bool cs = Truthy(a.GetOr(0, "case_sensitive", Value::Bool(false)));
         std::string by = PyStr(a.GetOr(1, "by", Value::Str("key")));
         bool reverse = Truthy(a.GetOr(2, "reverse", Value::Bool(false)));
         if (!v.is_dict()) throw TemplateError("dictsort: expected a mapping");
         ValueList items;
         for (const auto& [k, x] : v.dict->items) items.push_back(Value::List({k, x}, true));
         size_t pos = by == "value" ? 1 : 0;
         std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
           Value kx = SortKey((*x.list)[pos], cs), ky = SortKey((*y.list)[pos], cs);
           return reverse ? Less(ky, kx) : Less(kx, ky);
         });
         return Value::List(std::move(items));
       }},
      {"reverse", [](Evaluator&, const Value& v, CallArgs&) {
         if (v.is_string()) {
           std::u32string u = Utf8Decode(v.str());
           std::reverse(u.begin(), u.end());
           return Value::Str(Utf8Encode(u));
         }
         ValueList items = Iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::List(std::move(items));
       }},
      {"unique", [](Evaluator&, const Value& v, CallArgs& a) { return SortLike(v, a, 1); }},
      {"sort", [](Evaluator&, const Value& v, CallArgs& a) { return SortLike(v, a, 0); }},
      {"min", [](Evaluator&, const Value& v, CallArgs& a) { return SortLike(v, a, 2); }},
      {"max", [](Evaluator&, const Value& v, CallArgs& a) { return SortLike(v, a, 3); }},
      {"round", [](Evaluator&, const Value& v, CallArgs& a) { return Round(v, a); }},
      {"abs", [](Evaluator&, const Value& v, CallArgs&) {
         if (v.type == Value::Type::kFloat) return Value::Float(std::fabs(v.f));
         if (v.is_integral()) return Value::Int(std::llabs(v.as_int()));
         throw TemplateError(std::string("bad operand type for abs(): '") + v.TypeName() + "'");
       }},
      {"sum", [](Evaluator&, const Value& v, CallArgs& a) {
         std::string attr = AttrArg(a, 0);
         Value total = a.GetOr(1, "start", Value::Int(0));
         for (const auto& item : Iterate(v)) {
           Value x = attr.empty() ? item : AttrPath(item, attr);
           if (!x.is_number() || !total.is_number()) throw TemplateError("sum: non-numeric item");
           if (x.type == Value::Type::kFloat || total.type == Value::Type::kFloat) total = Value::Float(total.as_double() + x.as_double());
           else total = Value::Int(total.as_int() + x.as_int());
         }
         return total;
       }},
      {"indent", [](Evaluator&, const Value& v, CallArgs& a) { return Indent(v, a); }},
      {"attr", [](Evaluator&, const Value& v, CallArgs& a) {
         // Python getattr only: dict items are not attributes (namespace attributes are).
         std::string name = PyStr(a.GetOr(0, "name", Value::Str("")));
         if (v.is_dict() && !v.is_namespace && name != "get" && name != "items" && name != "keys" && name != "values")
           return Value::Undefined("'dict object' has no attribute '" + name + "'");
         return GetAttr(v, name);
       }},
      {"wordcount", [](Evaluator&, const Value& v, CallArgs&) {
         return Value::Int(static_cast<int64_t>(PySplit(PyStr(v), std::nullopt, -1, false).size()));
       }},
  };
  return *filters;
}

bool CmpTest(const Value& v, CallArgs& a, int op) {
  const Value* other = a.Get(0, "other");
  if (!other) throw TemplateError("comparison test needs an argument");
  switch (op) {
    case 0: return Equal(v, *other);
    case 1: return !Equal(v, *other);
    case 2: return Less(v, *other);
    case 3: return Less(v, *other) || Equal(v, *other);
    case 4: return Less(*other, v);
    default: return Less(*other, v) || Equal(v, *other);
  }
}

const std::unordered_map<std::string, TestFn>& Tests() {
  static const auto* tests = [] {
    auto* t = new std::unordered_map<std::string, TestFn>{
        {"defined", [](const Value& v, CallArgs&) { return !v.is_undefined(); }},
        {"undefined", [](const Value& v, CallArgs&) { return v.is_undefined(); }},
        {"none", [](const Value& v, CallArgs&) { return v.is_none(); }},
        {"boolean", [](const Value& v, CallArgs&) { return v.type == Value::Type::kBool; }},
        {"true", [](const Value& v, CallArgs&) { return v.type == Value::Type::kBool && v.b; }},
        {"false", [](const Value& v, CallArgs&) { return v.type == Value::Type::kBool && !v.b; }},
        {"integer", [](const Value& v, CallArgs&) { return v.type == Value::Type::kInt; }},
        {"float", [](const Value& v, CallArgs&) { return v.type == Value::Type::kFloat; }},
        {"number", [](const Value& v, CallArgs&) { return v.is_number(); }},
        {"string", [](const Value& v, CallArgs&) { return v.is_string(); }},
        {"mapping", [](const Value& v, CallArgs&) { return v.is_dict() && !v.is_namespace; }},
        {"iterable", [](const Value& v, CallArgs&) {
           return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace) || v.is_undefined();
         }},
        {"sequence", [](const Value& v, CallArgs&) {
           return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace) || v.is_undefined();
         }},
        {"callable", [](const Value& v, CallArgs&) { return v.type == Value::Type::kCallable; }},
        {"odd", [](const Value& v, CallArgs&) { return v.is_integral() && (v.as_int() % 2 != 0); }},
        {"even", [](const Value& v, CallArgs&) { return v.is_integral() && (v.as_int() % 2 == 0); }},
        {"divisibleby", [](const Value& v, CallArgs& a) {
           int64_t n = a.GetOr(0, "num", Value::Int(1)).as_int();
           return n != 0 && v.is_integral() && v.as_int() % n == 0;
         }},
        {"sameas", [](const Value& v, CallArgs& a) {
           const Value* o = a.Get(0, "other");
           if (!o || o->type != v.type) return false;
           switch (v.type) {
             case Value::Type::kNone:
             case Value::Type::kUndefined: return true;
             case Value::Type::kBool: return v.b == o->b;
             case Value::Type::kList: return v.list == o->list;
             case Value::Type::kDict: return v.dict == o->dict;
             default: return Equal(v, *o);
           }
         }},
        {"in", [](const Value& v, CallArgs& a) {
           const Value* seq = a.Get(0, "seq");
           if (!seq) throw TemplateError("'in' test needs an argument");
           if (seq->is_string()) return v.is_string() && seq->str().find(v.str()) != std::string::npos;
           if (seq->is_dict()) return seq->dict->Find(v) != nullptr;
           for (const auto& x : Iterate(*seq))
             if (Equal(x, v)) return true;
           return false;
         }},
        {"lower", [](const Value& v, CallArgs&) { return v.is_string() && PyLower(v.str()) == v.str(); }},
        {"upper", [](const Value& v, CallArgs&) { return v.is_string() && PyUpper(v.str()) == v.str(); }},
    };
    const char* names[6][4] = {{"eq", "equalto", "==", nullptr}, {"ne", "!=", nullptr, nullptr},
                               {"lt", "lessthan", "<", nullptr}, {"le", "<=", nullptr, nullptr},
                               {"gt", "greaterthan", ">", nullptr}, {"ge", ">=", nullptr, nullptr}};
    for (int op = 0; op < 6; ++op)
      for (const char* n : names[op])
        if (n) (*t)[n] = [op](const Value& v, CallArgs& a) { return CmpTest(v, a, op); };
    return t;
  }();
  return *tests;
}

}  // namespace

bool IsKnownFilter(const std::string& name) { return Filters().count(name) || name == "d" || name == "count"; }
bool IsKnownTest(const std::string& name) { return Tests().count(name) > 0; }

Value ApplyFilter(Evaluator& ev, const std::string& name, const Value& input, CallArgs& args) {
  const auto& f = Filters();
  auto it = f.find(name == "d" ? "default" : name);
  if (it == f.end()) throw TemplateError("unsupported filter '" + name + "'");
  return it->second(ev, input, args);
}

bool ApplyTest(const std::string& name, const Value& input, CallArgs& args) {
  const auto& t = Tests();
  auto it = t.find(name);
  if (it == t.end()) throw TemplateError("unsupported test '" + name + "'");
  return it->second(input, args);
}

}  // namespace tandem::chat
