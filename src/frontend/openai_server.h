// OpenAIService: the OpenAI-compatible API (vLLM semantics) as http::Handlers over an EngineClient.
//
//   POST /v1/chat/completions   chat (messages rendered with the model's chat template)
//   POST /v1/completions        raw prompts
//   GET  /v1/models             {"object":"list","data":[{"id","object":"model","created",
//                               "owned_by":"tandem","max_model_len"}]}
//   GET  /health                200 {"status":"ok"} once SetReady(true), else 503 {"status":"loading"};
//                               with a SetHealthReport provider, its answer instead: 200
//                               {"status":"ok","pools":{...}} or 503 {"status":"unhealthy",
//                               "reason":"no live decode worker","pools":{"decode":0,"prefill":1}}
//   GET  /metrics               the registry's Prometheus text (text/plain; version=0.0.4)
//
// Access: with a non-empty api_key every /v1 request needs "Authorization: Bearer <key>", else
// 401 {"error":{"type":"invalid_request_error","code":"invalid_api_key",...}}; /health and
// /metrics stay open.
//
// Each response carries its id ("chatcmpl-<hex>" / "cmpl-<hex>") in the body and in the header
// x-request-id; log lines about it start with "[<id>]". A request with n choices submits n engine
// requests "<id>-0" .. "<id>-<n-1>"; with a seed, choice i uses seed + i (different choices,
// reproducible). Request parameters and validation: frontend/openai_request.h; response shapes:
// frontend/openai_response.h; metric names: frontend/openai_metrics.h.
//
// Errors of EngineClient::Submit: ResourceExhausted (queue full) -> 503
// {"type":"server_error","code":"engine_overloaded"}; InvalidArgument, OutOfRange, Unimplemented
// -> 400 invalid_request_error; NotFound -> 404; FailedPrecondition -> 503; others -> 500
// server_error. An engine error (or an abort the client did not cause) before the first output
// is an HTTP error (a remote worker's refusal, RequestOutput::refusal, maps like a Submit error
// with the engine's own words; else 500, a generic message naming the response id; the engine's own text, which
// for a remote worker names its address, is logged instead); after a stream started it is an SSE event `data: {"error":{...}}`
// followed by `data: [DONE]`. A client that disconnects (ResponseWriter::OnDisconnect or a failed
// write) has its engine requests cancelled, so their KV blocks return to the pool.
//
// Threading: handlers run on the connection's executor; engine callbacks hand outputs to the
// handler through a concurrent channel held by shared state, so a callback never touches a
// finished handler. The EngineClient must stop calling callbacks before the io_context that runs
// the handlers is destroyed.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "chat/template.h"
#include "chat_parse/reasoning.h"
#include "chat_parse/tool_calls.h"
#include "common/metrics.h"
#include "engine/engine_client.h"
#include "frontend/http.h"
#include "model/generation_config.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

// What /health says (OpenAIService::SetHealthReport).
struct HealthReport {
  bool healthy = false;  // 200 when true, else 503
  std::string reason;    // why not healthy ("no live decode worker"); omitted when empty
  std::map<std::string, int> pools;  // live workers per pool ("agg", "decode", "prefill")
};

struct OpenAIServiceOptions {
  std::string served_model_name;  // empty: EngineClient::model_info().name
  std::string api_key;            // empty: no authentication
  int max_n = 16;                 // largest accepted `n` (tandem run: at most max_num_seqs +
                                  // max_waiting_requests, what its engine can ever hold)
  // Chat output parsers (frontend/chat_output.h; --reasoning-parser, --tool-call-parser);
  // nullopt: the one the chat template calls for (chat_parse/*ForTemplate; Qwen3: qwen3, hermes).
  std::optional<chat_parse::ReasoningFormat> reasoning_parser;
  std::optional<chat_parse::ToolCallFormat> tool_call_parser;
  // Sampling defaults for requests that leave them out (--generation-config; openai_request.h).
  SamplingDefaults sampling_defaults;
};

// Registers a handler for an exact (method, path), e.g. HttpServer::Route.
using RouteRegistrar =
    std::function<void(std::string method, std::string path, http::Handler handler)>;

class OpenAIService {
 public:
  // `renderer` may be null (then /v1/chat/completions answers 400). `registry` must outlive the
  // service; an engine-stats collector is added to it (holding the engine weakly).
  OpenAIService(std::shared_ptr<EngineClient> engine, std::shared_ptr<const Tokenizer> tokenizer,
                std::shared_ptr<const ChatRenderer> renderer, OpenAIServiceOptions options,
                metrics::Registry* registry = &metrics::Registry::Default());
  ~OpenAIService();
  OpenAIService(const OpenAIService&) = delete;
  OpenAIService& operator=(const OpenAIService&) = delete;

  // Handlers share the service's state (they stay valid after the service is destroyed).
  http::Handler ChatCompletions();
  http::Handler Completions();
  http::Handler Models();
  http::Handler Health();
  http::Handler Metrics();
  // All five routes above.
  void Register(const RouteRegistrar& route);

  void SetReady(bool ready);
  bool ready() const;
  // /health asks `report` (on the connection's thread; keep it cheap and thread-safe) instead of
  // the SetReady flag. Before Register or at any time; null: the SetReady flag again.
  void SetHealthReport(std::function<HealthReport()> report);
  const std::string& served_model_name() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tandem
