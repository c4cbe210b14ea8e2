// YamlFields: checked reads of YAML nodes for the deployment graph (graph.h) and its kubernetes:
// section (deploy/k8s/settings.h). Every failed check throws YamlFieldError with InvalidArgument
// "<source>:<line>: <what>" (line 1-based; "<source>: <what>" where yaml-cpp knows no line);
// the parser's entry point catches it and returns the Status.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "common/status.h"

namespace tandem::runtime {

struct YamlFieldError {
  Status status;
};

class YamlFields {
 public:
  explicit YamlFields(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void Fail(const YAML::Node& at, const std::string& what) const;
  // The keys of a map, each checked against `allowed` and for duplicates, in file order.
  std::vector<std::pair<std::string, YAML::Node>> Fields(const YAML::Node& map, const std::string& what,
                                                         const std::set<std::string>& allowed) const;
  std::string String(const YAML::Node& n, const std::string& key) const;
  int Int(const YAML::Node& n, const std::string& key, long long min, long long max) const;
  double Number(const YAML::Node& n, const std::string& key, double min) const;  // >= min
  bool Bool(const YAML::Node& n, const std::string& key) const;
  // One of `ok`; the error lists them.
  std::string OneOf(const YAML::Node& n, const std::string& key, const std::set<std::string>& ok) const;
  std::vector<std::string> StringList(const YAML::Node& n, const std::string& key) const;
  std::map<std::string, std::string> StringMap(const YAML::Node& n, const std::string& key) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace tandem::runtime
