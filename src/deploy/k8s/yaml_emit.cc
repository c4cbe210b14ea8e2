#include "deploy/k8s/yaml_emit.h"

#include <regex>

namespace tandem::k8s {
namespace {

using json = nlohmann::ordered_json;

std::string Scalar(const json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return IsPlainSafe(s) ? s : json(s).dump();
  }
  return v.dump();  // numbers, booleans, null
}

bool IsEmptyCollection(const json& v) { return (v.is_object() || v.is_array()) && v.empty(); }

void EmitNode(const json& v, int indent, std::string& out);

// The value after "key:" or "- " : scalars and empty collections inline, the rest below.
void EmitValue(const json& v, int indent, std::string& out) {
  if (v.is_object() && !v.empty()) {
    out += "\n";
    EmitNode(v, indent + 2, out);
  } else if (v.is_array() && !v.empty()) {
    out += "\n";
    EmitNode(v, indent + 2, out);
  } else {
    out += " " + (IsEmptyCollection(v) ? std::string(v.is_object() ? "{}" : "[]") : Scalar(v)) + "\n";
  }
}

void EmitNode(const json& v, int indent, std::string& out) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      out += pad + (IsPlainSafe(key) ? key : json(key).dump()) + ":";
      EmitValue(value, indent, out);
    }
  } else if (v.is_array()) {
    for (const auto& item : v) {
      if (item.is_object() && !item.empty()) {
        // "- first: x" then the other keys aligned under "first".
        std::string body;
        EmitNode(item, indent + 2, body);
        out += pad + "- " + body.substr(indent + 2);
      } else if (item.is_array() && !item.empty()) {
        out += pad + "-\n";
        EmitNode(item, indent + 2, out);
      } else {
        out += pad + "-";
        EmitValue(item, indent, out);
      }
    }
  } else {
    out += pad + Scalar(v) + "\n";
  }
}

}  // namespace

bool IsPlainSafe(const std::string& s) {
  if (s.empty()) return false;
  // Characters that never need quoting in block context here; no leading/trailing specials.
  static const std::regex chars("[A-Za-z0-9_./-][A-Za-z0-9_./:@=+-]*");
  if (!std::regex_match(s, chars)) return false;
  if (s.back() == ':' || s == "-" || s.find(": ") != std::string::npos) return false;
  // YAML 1.1 and 1.2 numbers (incl. 0x, 0o, 1_000, 1:30 sexagesimal, .5, 1e3) and specials.
  static const std::regex number(
      "[-+]?([0-9][0-9_]*)?(\\.[0-9_]*)?([eE][-+]?[0-9]+)?|[-+]?0[xXoObB][0-9A-Fa-f_]+|"
      "[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\\.[0-9_]*)?|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)");
  if (std::regex_match(s, number)) return false;
  static const std::regex special(
      "y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF|"
      "null|Null|NULL|~|=|<<");
  return !std::regex_match(s, special);
}

std::string EmitYaml(const nlohmann::ordered_json& doc) {
  if (IsEmptyCollection(doc)) return doc.is_object() ? "{}\n" : "[]\n";
  std::string out;
  EmitNode(doc, 0, out);
  return out;
}

}  // namespace tandem::k8s
