#include "cli/serve_options.h"

#include <cstdlib>

#include <pthread.h>

namespace tandem::cli {

http::HttpServer::Options HttpOptions::ToServerOptions() const {
  http::HttpServer::Options o;
  o.host = host;
  o.port = port;
  o.num_threads = http_threads;
  o.max_body_bytes = max_body_bytes;
  return o;
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
