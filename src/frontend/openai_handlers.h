// Internal to the OpenAI service: its shared state and the generation handler
// (openai_handlers.cc). The public face is frontend/openai_server.h.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "frontend/http.h"
#include "frontend/openai_metrics.h"
#include "frontend/openai_request.h"
#include "frontend/openai_server.h"

namespace tandem {

struct OpenAIService::State {
  State(std::shared_ptr<EngineClient> e, std::shared_ptr<const Tokenizer> t,
        std::shared_ptr<const ChatRenderer> r, OpenAIServiceOptions o, metrics::Registry* reg)
      : engine(std::move(e)), tokenizer(std::move(t)), renderer(std::move(r)),
        options(std::move(o)), metrics(reg) {}
  std::shared_ptr<EngineClient> engine;
  std::shared_ptr<const Tokenizer> tokenizer;
  std::shared_ptr<const ChatRenderer> renderer;
  OpenAIServiceOptions options;  // served_model_name resolved
  openai::ServiceMetrics metrics;
  std::atomic<bool> ready{false};
  std::mutex health_mu;
  std::shared_ptr<const std::function<HealthReport()>> health_report;  // guarded by health_mu; may be null
  int max_token_bytes = 0;  // openai::MaxTokenBytes(*tokenizer), for early context checks
};

namespace openai {

// 401 ApiError when the service has an api_key and the request does not carry it.
std::optional<ApiError> CheckAuth(const OpenAIService::State& state, const http::Request& request);

// Writes `error` as a JSON error response.
boost::asio::awaitable<bool> WriteError(http::ResponseWriter& writer, const ApiError& error,
                                        std::map<std::string, std::string> headers);

// POST /v1/chat/completions and /v1/completions.
boost::asio::awaitable<void> HandleGenerate(std::shared_ptr<OpenAIService::State> state,
                                            Endpoint endpoint, const http::Request& request,
                                            http::ResponseWriter& writer);

}  // namespace openai
}  // namespace tandem
