// A block-style YAML writer for Kubernetes manifests built as nlohmann::ordered_json: keys in
// insertion order (so output is deterministic), lists indented under their key, strings written
// plain when YAML reads them back as the same string and double-quoted (JSON escapes) otherwise
// ("8000", "true", "$(POD_IP)", ...). Numbers, booleans and null are written as such.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tandem::k8s {

// One YAML document (no "---"), ending with a newline. An empty object gives "{}\n".
std::string EmitYaml(const nlohmann::ordered_json& doc);

// True when `s` can be written as a plain scalar and reads back as the string `s`.
bool IsPlainSafe(const std::string& s);

}  // namespace tandem::k8s
