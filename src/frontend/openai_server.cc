#include "frontend/openai_server.h"

#include "common/logging.h"
#include "frontend/openai_handlers.h"
#include "frontend/openai_response.h"

namespace tandem {

namespace asio = boost::asio;
using openai::ojson;

OpenAIService::OpenAIService(std::shared_ptr<EngineClient> engine,
                             std::shared_ptr<const Tokenizer> tokenizer,
                             std::shared_ptr<const ChatRenderer> renderer,
                             OpenAIServiceOptions options, metrics::Registry* registry) {
  if (options.served_model_name.empty()) options.served_model_name = engine->model_info().name;
  state_ = std::make_shared<State>(std::move(engine), std::move(tokenizer), std::move(renderer),
                                   std::move(options), registry);
  state_->metrics.AddEngineCollector(state_->engine);
  state_->max_token_bytes = openai::MaxTokenBytes(*state_->tokenizer);
  const std::string source = state_->renderer ? state_->renderer->source() : std::string();
  OpenAIServiceOptions& o = state_->options;
  if (!o.reasoning_parser) o.reasoning_parser = chat_parse::ReasoningFormatForTemplate(source);
  if (!o.tool_call_parser) o.tool_call_parser = chat_parse::ToolCallFormatForTemplate(source);
  log::info("chat output parsers: reasoning {}, tool calls {}",
            chat_parse::ReasoningFormatName(*o.reasoning_parser),
            chat_parse::ToolCallFormatName(*o.tool_call_parser));
}

OpenAIService::~OpenAIService() = default;

void OpenAIService::SetReady(bool ready) { state_->ready = ready; }
void OpenAIService::SetHealthReport(std::function<HealthReport()> report) {
  std::shared_ptr<const std::function<HealthReport()>> p;
  if (report) p = std::make_shared<const std::function<HealthReport()>>(std::move(report));
  std::lock_guard<std::mutex> lock(state_->health_mu);
  state_->health_report = std::move(p);
}
bool OpenAIService::ready() const { return state_->ready; }
const std::string& OpenAIService::served_model_name() const {
  return state_->options.served_model_name;
}

http::Handler OpenAIService::ChatCompletions() {
  return [s = state_](const http::Request& req, http::ResponseWriter& w) {
    return openai::HandleGenerate(s, openai::Endpoint::kChatCompletions, req, w);
  };
}

http::Handler OpenAIService::Completions() {
  return [s = state_](const http::Request& req, http::ResponseWriter& w) {
    return openai::HandleGenerate(s, openai::Endpoint::kCompletions, req, w);
  };
}

namespace {

asio::awaitable<void> HandleModels(std::shared_ptr<OpenAIService::State> s,
                                   const http::Request& req, http::ResponseWriter& w) {
  std::map<std::string, std::string> headers;
  int status = 200;
  if (auto e = openai::CheckAuth(*s, req)) {
    status = e->status;
    co_await openai::WriteError(w, *e, headers);
  } else {
    ServedModelInfo info = s->engine->model_info();
    ojson model{{"id", s->options.served_model_name},
                {"object", "model"},
                {"created", openai::UnixSeconds()},
                {"owned_by", "tandem"},
                {"max_model_len", info.max_model_len}};
    ojson body{{"object", "list"}, {"data", ojson::array({model})}};
    co_await w.WriteFull(200, "application/json", openai::Dump(body));
  }
  s->metrics.CountRequest("/v1/models", status);
}

asio::awaitable<void> HandleHealth(std::shared_ptr<OpenAIService::State> s,
                                   const http::Request&, http::ResponseWriter& w) {
  std::shared_ptr<const std::function<HealthReport()>> report;
  {
    std::lock_guard<std::mutex> lock(s->health_mu);
    report = s->health_report;
  }
  if (report) {
    const HealthReport r = (*report)();
    ojson body{{"status", r.healthy ? "ok" : "unhealthy"}};
    if (!r.reason.empty()) body["reason"] = r.reason;
    ojson pools = ojson::object();
    for (const auto& [name, n] : r.pools) pools[name] = n;
    body["pools"] = std::move(pools);
    co_await w.WriteFull(r.healthy ? 200 : 503, "application/json", openai::Dump(body));
    co_return;
  }
  if (s->ready)
    co_await w.WriteFull(200, "application/json", R"({"status":"ok"})");
  else
    co_await w.WriteFull(503, "application/json", R"({"status":"loading"})");
}

asio::awaitable<void> HandleMetrics(std::shared_ptr<OpenAIService::State> s,
                                    const http::Request&, http::ResponseWriter& w) {
  co_await w.WriteFull(200, metrics::kTextContentType, s->metrics.registry().RenderText());
}

}  // namespace

http::Handler OpenAIService::Models() {
  return [s = state_](const http::Request& req, http::ResponseWriter& w) {
    return HandleModels(s, req, w);
  };
}

http::Handler OpenAIService::Health() {
  return [s = state_](const http::Request& req, http::ResponseWriter& w) {
    return HandleHealth(s, req, w);
  };
}

http::Handler OpenAIService::Metrics() {
  return [s = state_](const http::Request& req, http::ResponseWriter& w) {
    return HandleMetrics(s, req, w);
  };
}

void OpenAIService::Register(const RouteRegistrar& route) {
  route("POST", "/v1/chat/completions", ChatCompletions());
  route("POST", "/v1/completions", Completions());
  route("GET", "/v1/models", Models());
  route("GET", "/health", Health());
  route("GET", "/metrics", Metrics());
}

}  // namespace tandem
