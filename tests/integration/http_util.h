// Helpers shared by the multi-process integration tests: the golden files' folder, reading a log,
// HTTP through curl (status + body), one Prometheus sample, and the text of an OpenAI SSE stream.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "subprocess.h"

namespace tandem::testing {

// The golden files' folder (tests/golden of the repository).
inline std::string GoldenDir() { return TANDEM_GOLDEN_DIR; }

// n space-separated words "w<k> " from a seed: a prompt that differs per seed and tokenizes the
// same every time (the KV tier tests' workloads).
inline std::string SeededWords(int seed, int n) {
  std::string p;
  for (int i = 0; i < n; ++i) p += "w" + std::to_string((seed * 7919 + i * 104729) % 997) + " ";
  return p;
}

// The whole file ("" when it cannot be read).
inline std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct HttpResult {
  int status = 0;  // 0: curl got no answer
  std::string body;
};

// `curl -s -m timeout_s <args>`; args are shell words (quote them with ShellQuote).
inline HttpResult Curl(const std::string& args, int timeout_s) {
  auto r = RunCommand("curl -s -m " + std::to_string(timeout_s) + " -w '\\n%{http_code}' " + args,
                      timeout_s + 10);
  HttpResult h;
  const size_t nl = r.out.rfind('\n');
  if (nl == std::string::npos) return h;
  h.status = std::atoi(r.out.c_str() + nl + 1);
  h.body = r.out.substr(0, nl);
  return h;
}

// One sample of a Prometheus text body (no labels); -1 when absent.
inline double MetricValue(const std::string& body, const std::string& name) {
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

// The text of an SSE stream: every choice-0 text / delta.content, in order; error events counted.
inline std::string StreamText(const std::string& body, bool chat, int* num_errors, bool* done) {
  std::string text;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0) continue;
    std::string data = line.substr(6);
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("error")) ++*num_errors;
    if (!j.contains("choices") || j["choices"].empty()) continue;
    const auto& c = j["choices"][0];
    if (chat) {
      if (c["delta"].contains("content") && c["delta"]["content"].is_string())
        text += c["delta"]["content"].get<std::string>();
    } else {
      text += c["text"].get<std::string>();
    }
  }
  return text;
}

}  // namespace tandem::testing
