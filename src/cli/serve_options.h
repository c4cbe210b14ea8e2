// What the long-running commands (`tandem run`, `tandem frontend`, `tandem worker`) share: the
// HTTP front's flags and the shutdown signals.
#pragma once

#include <csignal>
#include <cstddef>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "frontend/http_server.h"
#include "frontend/openai_server.h"

namespace tandem::cli {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;  // empty: the environment variable TANDEM_API_KEY, if set
  int http_threads = 2;
  size_t max_body_bytes = 8u << 20;
  // Slow and idle clients (frontend/http_server.h): seconds, and connections open at once.
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double keep_alive_timeout_s = 5;
  size_t max_connections = 1024;
  // Chat output parsers (--reasoning-parser, --tool-call-parser): a name of
  // chat_parse/reasoning.h / tool_calls.h, or empty: the one the model's chat template calls for.
  std::string reasoning_parser;
  std::string tool_call_parser;
  // --generation-config: "auto" (the model directory's generation_config.json), "vllm" (none:
  // OpenAI's defaults) or a directory holding a generation_config.json.
  std::string generation_config = "auto";

  http::HttpServer::Options ToServerOptions() const;
  // The parsers into the OpenAI service's options (names already checked by the flags).
  void SetParsers(OpenAIServiceOptions* options) const;
  // The sampling defaults --generation-config names: none for vllm, the model directory's file for
  // auto (none without one), DIR's file otherwise. Errors: LoadSamplingDefaults' (a malformed
  // file), NotFound for a DIR without generation_config.json (a typo such as AUTO lands here).
  Result<SamplingDefaults> SamplingDefaultsFor(const std::string& model_dir) const;
  // The same into the service's options, logged.
  Status SetSamplingDefaults(const std::string& model_dir, OpenAIServiceOptions* options) const;
  // These options as `tandem frontend` flags (for `tandem run`'s frontend process).
  std::vector<std::string> FrontendArgs() const;
  std::string ApiKey() const;  // --api-key, else TANDEM_API_KEY, else empty (no auth)
};

// --host, --port, --api-key, --http-threads, --max-body-bytes, --http-header-timeout-s,
// --http-body-timeout-s, --http-keep-alive-timeout-s, --max-connections, --reasoning-parser,
// --tool-call-parser, --generation-config.
void AddHttpOptions(CLI::App& app, HttpOptions* options);

// SIGINT and SIGTERM end a serving process. The constructor blocks them in the calling thread:
// construct it before starting any thread, so every thread inherits the mask and Wait() (sigwait)
// is the one place they are taken.
class ShutdownSignals {
 public:
  ShutdownSignals();
  int Wait();  // the signal number

 private:
  sigset_t signals_;
};

}  // namespace tandem::cli
