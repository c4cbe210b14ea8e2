#include "deploy/yaml_fields.h"

#include <fmt/format.h>

namespace tandem::runtime {

void YamlFields::Fail(const YAML::Node& at, const std::string& what) const {
  const YAML::Mark mark = at.Mark();
  if (mark.line >= 0) {
    throw YamlFieldError{Err(StatusCode::kInvalidArgument, "{}:{}: {}", source_, mark.line + 1, what)};
  }
  throw YamlFieldError{Err(StatusCode::kInvalidArgument, "{}: {}", source_, what)};
}

std::vector<std::pair<std::string, YAML::Node>> YamlFields::Fields(
    const YAML::Node& map, const std::string& what, const std::set<std::string>& allowed) const {
  if (!map.IsMap()) Fail(map, what + " must be a mapping");
  std::vector<std::pair<std::string, YAML::Node>> out;
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) Fail(it->first, what + ": keys must be plain names");
    const std::string key = it->first.as<std::string>();
    if (!allowed.count(key)) {
      std::string known;
      for (const auto& k : allowed) known += (known.empty() ? "" : ", ") + k;
      Fail(it->first, "unknown key '" + key + "' in " + what + " (known: " + known + ")");
    }
    if (!seen.insert(key).second) Fail(it->first, "duplicate key '" + key + "' in " + what);
    out.emplace_back(key, it->second);
  }
  return out;
}

std::string YamlFields::String(const YAML::Node& n, const std::string& key) const {
  if (!n.IsScalar()) Fail(n, "'" + key + "' must be a string");
  return n.as<std::string>();
}

int YamlFields::Int(const YAML::Node& n, const std::string& key, long long min, long long max) const {
  long long v = 0;
  if (!n.IsScalar() || !YAML::convert<long long>::decode(n, v)) {
    Fail(n, "'" + key + "' must be an integer");
  }
  if (v < min || v > max) {
    Fail(n, fmt::format("'{}' must be in [{}, {}] (got {})", key, min, max, v));
  }
  return static_cast<int>(v);
}

double YamlFields::Number(const YAML::Node& n, const std::string& key, double min) const {
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) {
    Fail(n, "'" + key + "' must be a number");
  }
  if (!(v >= min)) Fail(n, fmt::format("'{}' must be at least {} (got {})", key, min, v));
  return v;
}

bool YamlFields::Bool(const YAML::Node& n, const std::string& key) const {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) Fail(n, "'" + key + "' must be true or false");
  return v;
}

std::string YamlFields::OneOf(const YAML::Node& n, const std::string& key,
                              const std::set<std::string>& ok) const {
  std::string s = String(n, key);
  if (!ok.count(s)) {
    std::string known;
    for (const auto& k : ok) known += (known.empty() ? "" : ", ") + k;
    Fail(n, "'" + key + "' must be one of " + known + " (got '" + s + "')");
  }
  return s;
}

std::vector<std::string> YamlFields::StringList(const YAML::Node& n, const std::string& key) const {
  if (!n.IsSequence()) Fail(n, "'" + key + "' must be a list");
  std::vector<std::string> out;
  for (const auto& item : n) {
    if (!item.IsScalar()) Fail(item, "'" + key + "' items must be strings");
    out.push_back(item.as<std::string>());
  }
  return out;
}

std::map<std::string, std::string> YamlFields::StringMap(const YAML::Node& n, const std::string& key) const {
  if (!n.IsMap()) Fail(n, "'" + key + "' must be a mapping");
  std::map<std::string, std::string> out;
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = String(it->first, key + " key");
    if (!it->second.IsScalar()) Fail(it->second, "'" + key + "." + k + "' must be a string");
    if (!out.emplace(k, it->second.as<std::string>()).second) {
      Fail(it->first, "duplicate key '" + k + "' in " + key);
    }
  }
  return out;
}

}  // namespace tandem::runtime
