#include "cli/serve_options.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include <pthread.h>

#include "common/logging.h"
#include "model/generation_config.h"

namespace tandem::cli {

http::HttpServer::Options HttpOptions::ToServerOptions() const {
  http::HttpServer::Options o;
  o.host = host;
  o.port = port;
  o.num_threads = http_threads;
  o.max_body_bytes = max_body_bytes;
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000 + 0.5)); };
  o.header_timeout = ms(header_timeout_s);
  o.body_timeout = ms(body_timeout_s);
  o.keep_alive_timeout = ms(keep_alive_timeout_s);
  o.max_connections = max_connections;
  return o;
}

std::vector<std::string> HttpOptions::FrontendArgs() const {
  std::vector<std::string> args{"--http-threads",         std::to_string(http_threads),
          "--max-body-bytes",       std::to_string(max_body_bytes),
          "--http-header-timeout-s", fmt::format("{}", header_timeout_s),
          "--http-body-timeout-s",  fmt::format("{}", body_timeout_s),
          "--http-keep-alive-timeout-s", fmt::format("{}", keep_alive_timeout_s),
          "--max-connections",      std::to_string(max_connections)};
  if (!reasoning_parser.empty()) args.insert(args.end(), {"--reasoning-parser", reasoning_parser});
  if (!tool_call_parser.empty()) args.insert(args.end(), {"--tool-call-parser", tool_call_parser});
  args.insert(args.end(), {"--generation-config", generation_config});
  return args;
}

void HttpOptions::SetParsers(OpenAIServiceOptions* options) const {
  if (!reasoning_parser.empty()) options->reasoning_parser = chat_parse::ParseReasoningFormat(reasoning_parser);
  if (!tool_call_parser.empty()) options->tool_call_parser = chat_parse::ParseToolCallFormat(tool_call_parser);
}

Result<SamplingDefaults> HttpOptions::SamplingDefaultsFor(const std::string& model_dir) const {
  if (generation_config == "vllm") return SamplingDefaults{};
  if (generation_config == "auto") return LoadSamplingDefaults(model_dir);
  const std::string file = (std::filesystem::path(generation_config) / "generation_config.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    return Err(StatusCode::kNotFound, "--generation-config {}: no {} (auto, vllm, or a directory holding one)",
               generation_config, file);
  }
  return LoadSamplingDefaults(generation_config);
}

Status HttpOptions::SetSamplingDefaults(const std::string& model_dir, OpenAIServiceOptions* options) const {
  TANDEM_ASSIGN_OR_RETURN(options->sampling_defaults, SamplingDefaultsFor(model_dir));
  if (!options->sampling_defaults.empty()) {
    const std::string dir = generation_config == "auto" ? model_dir : generation_config;
    log::info("sampling defaults from {}/generation_config.json for requests that leave them out: {} "
              "(--generation-config vllm: none)", dir, options->sampling_defaults.ToString());
  }
  return Status::Ok();
}

std::string HttpOptions::ApiKey() const {
  if (!api_key.empty()) return api_key;
  const char* env = std::getenv("TANDEM_API_KEY");
  return env ? env : "";
}

void AddHttpOptions(CLI::App& app, HttpOptions* options) {
  app.add_option("--host", options->host, "Address to listen on");
  app.add_option("--port", options->port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--api-key", options->api_key,
                 "Require 'Authorization: Bearer KEY' on /v1 (env TANDEM_API_KEY)");
  app.add_option("--http-threads", options->http_threads, "Threads serving HTTP")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--max-body-bytes", options->max_body_bytes, "Largest request body (else 413)")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--http-header-timeout-s", options->header_timeout_s,
                 "Seconds a request's line and headers may take to arrive (from the connection's "
                 "accept, or the request's first byte on a kept-alive one); else 408 and close (default 10)")
      ->check(CLI::Range(0.001, 86400.0));
  app.add_option("--http-body-timeout-s", options->body_timeout_s,
                 "Seconds a request's whole body may take to arrive after its headers; else 408 "
                 "and close (default 30)")
      ->check(CLI::Range(0.001, 86400.0));
  app.add_option("--http-keep-alive-timeout-s", options->keep_alive_timeout_s,
                 "Seconds an idle kept-alive connection waits for its next request before it is "
                 "closed (default 5)")
      ->check(CLI::Range(0.001, 86400.0));
  app.add_option("--max-connections", options->max_connections,
                 "HTTP connections open at once; beyond, the one waiting longest for its request "
                 "is closed, or when all are busy the new one gets 503 with Retry-After (lowered "
                 "to fit ulimit -n; default 1024)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--reasoning-parser", options->reasoning_parser,
                 "Split <think> reasoning into reasoning_content: qwen3, deepseek_r1 or none "
                 "(default: from the chat template; Qwen3: qwen3)")
      ->check(CLI::IsMember({"qwen3", "deepseek_r1", "none"}));
  app.add_option("--tool-call-parser", options->tool_call_parser,
                 "Read tool calls out of chat output: hermes, qwen3_coder, llama3_json, mistral, "
                 "pythonic or none (default: from the chat template; Qwen3: hermes)")
      ->check(CLI::IsMember({"hermes", "qwen3_coder", "llama3_json", "mistral", "pythonic", "none"}));
  app.add_option("--generation-config", options->generation_config,
                 "Sampling defaults (temperature, top_p, top_k, min_p, repetition_penalty) for requests "
                 "that leave them out: auto (the model's generation_config.json; Qwen3: temperature "
                 "0.6, top_k 20, top_p 0.95), vllm (none: OpenAI's, temperature 1) or a directory "
                 "holding a generation_config.json (vLLM's flag)");
}

ShutdownSignals::ShutdownSignals() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

int ShutdownSignals::Wait() {
  int signal_number = 0;
  sigwait(&signals_, &signal_number);
  return signal_number;
}

}  // namespace tandem::cli
