// Shared helpers of the chat template tests.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tandem::chat_test {

using ojson = nlohmann::ordered_json;

// The chat_template of the bundled model's tokenizer_config.json.
std::string Qwen3Template();

struct OracleCase {
  std::string name;
  std::string source;
  ojson context;
};

struct OracleResult {
  bool ok = false;
  std::string output;  // the rendered text, or the Python exception
};

// Renders every case with tests/tools/render_jinja.py (Debian's /usr/bin/python3 + jinja2) in
// one process. Fails the calling test (and returns {}) when the script cannot run.
std::vector<OracleResult> RenderWithJinja2(const std::vector<OracleCase>& cases);

// Checks our ChatTemplate against the oracle for each case: byte-identical output, or both fail.
void ExpectMatchesOracle(const std::vector<OracleCase>& cases);

}  // namespace tandem::chat_test
