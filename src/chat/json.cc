// JSON <-> Value for the chat template renderer: FromJson for the render context, and JsonDumps,
// which writes what Python's json.dumps writes (transformers' tojson filter; see chat_value.h).
#include <algorithm>
#include <cmath>

#include "chat/text.h"
#include "chat/value.h"

namespace tandem::chat {

Value FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::Str(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::NewDict();
      d.dict->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict->items.emplace_back(Value::Str(it.key()), FromJson(it.value()));
      return d;
    }
    default: return Value::None();  // binary / discarded: not produced by the JSON parser
  }
}

namespace {

// JSON's two-character escapes (json.dumps writes these; other control characters as \uXXXX).
const char* ShortEscape(char32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: return nullptr;
  }
}

void AppendJsonString(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  auto hex4 = [&](unsigned v) {
    char b[16];
    std::snprintf(b, sizeof(b), "\\u%04x", v & 0xFFFFu);
    out += b;
  };
  if (!ensure_ascii) {
    for (char ch : s) {
      unsigned char c = static_cast<unsigned char>(ch);
      if (const char* e = ShortEscape(c)) out += e;
      else if (c < 0x20) hex4(c);
      else out.push_back(ch);
    }
  } else {
    for (char32_t c : Utf8Decode(s)) {
      if (const char* e = ShortEscape(c)) {
        out += e;
      } else if (c < 0x20 || (c >= 0x7F && c < 0x10000)) {
        hex4(c);
      } else if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        hex4(0xD800 + (v >> 10));
        hex4(0xDC00 + (v & 0x3FF));
      } else {
        out.push_back(static_cast<char>(c));
      }
    }
  }
  out.push_back('"');
}

std::string KeyString(const Value& k) {
  switch (k.type) {
    case Value::Type::kString: return k.str();
    case Value::Type::kBool: return k.b ? "true" : "false";
    case Value::Type::kNone: return "null";
    case Value::Type::kInt: return std::to_string(k.i);
    case Value::Type::kFloat: return FloatRepr(k.f);
    default: throw TemplateError(std::string("keys must be str, int, float, bool or None, not ") + k.TypeName());
  }
}

void Dump(std::string& out, const Value& v, const JsonDumpOptions& o, int depth) {
  auto newline = [&](int d) {
    out.push_back('\n');
    for (int k = 0; k < d; ++k) {
      out += o.indent;
      CheckStringSize(out.size(), "tojson");
    }
  };
  switch (v.type) {
    case Value::Type::kNone: out += "null"; return;
    case Value::Type::kBool: out += v.b ? "true" : "false"; return;
    case Value::Type::kInt: out += std::to_string(v.i); return;
    case Value::Type::kFloat:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += FloatRepr(v.f);
      return;
    case Value::Type::kString: AppendJsonString(out, v.str(), o.ensure_ascii); return;
    case Value::Type::kList: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += o.item_separator;
        if (o.has_indent) newline(depth + 1);
        Dump(out, (*v.list)[k], o, depth + 1);
        CheckStringSize(out.size(), "tojson");
      }
      if (o.has_indent) newline(depth);
      out.push_back(']');
      return;
    }
    case Value::Type::kDict: {
      if (v.is_namespace) throw TemplateError("Object of type Namespace is not JSON serializable");
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, x] : v.dict->items) entries.emplace_back(KeyString(k), &x);
      if (o.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      out.push_back('{');
      for (size_t k = 0; k < entries.size(); ++k) {
        if (k) out += o.item_separator;
        if (o.has_indent) newline(depth + 1);
        AppendJsonString(out, entries[k].first, o.ensure_ascii);
        out += o.key_separator;
        Dump(out, *entries[k].second, o, depth + 1);
        CheckStringSize(out.size(), "tojson");
      }
      if (o.has_indent) newline(depth);
      out.push_back('}');
      return;
    }
    case Value::Type::kUndefined: throw TemplateError("Object of type Undefined is not JSON serializable");
    case Value::Type::kCallable: throw TemplateError("Object of type function is not JSON serializable");
  }
}

}  // namespace

std::string JsonDumps(const Value& v, const JsonDumpOptions& options) {
  std::string out;
  Dump(out, v, options, 0);
  return out;
}

}  // namespace tandem::chat
