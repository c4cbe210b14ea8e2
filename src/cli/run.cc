// tandem run --mode agg: one process holding the OpenAI-compatible frontend and one aggregated
// worker (the CPU engine on its own thread). /health answers 503 until the model is loaded.
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>


#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_bundle.h"
#include "cli/serve_options.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "engine/async_engine.h"
#include "frontend/errors.h"
#include "frontend/http_server.h"
#include "frontend/openai_server.h"

namespace tandem::cli {
namespace {

struct RunOptions {
  std::string mode = "agg";
  EngineOptions engine;
  HttpOptions http;
};

// Routes registered before the server starts, bound to the OpenAI service once the model loaded.
// Until then /health and every other route answer 503 "loading".
class LateRoutes {
 public:
  http::Handler Forward(const std::string& method, const std::string& path) {
    return [this, key = method + " " + path](const http::Request& req,
                                            http::ResponseWriter& w) -> boost::asio::awaitable<void> {
      http::Handler live;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = live_.find(key);
        if (it != live_.end()) live = it->second;
      }
      if (live) {
        co_await live(req, w);
        co_return;
      }
      co_await w.WriteFull(503, "application/json",
                           http::OpenAIErrorBody("the model is still loading", "server_error", "",
                                           "model_loading"));
    };
  }
  void Bind(std::string method, std::string path, http::Handler handler) {
    std::lock_guard<std::mutex> lock(mu_);
    live_[method + " " + path] = std::move(handler);
  }

 private:
  std::mutex mu_;
  std::map<std::string, http::Handler> live_;
};

int RunAggregated(const RunOptions& opt) {
  if (opt.mode != "agg") {
    std::fprintf(stderr, "tandem run: --mode %s is not available yet; use --mode agg\n",
                 opt.mode.c_str());
    return 2;
  }
  const std::string model_dir = opt.engine.ModelDir();
  const std::string api_key = opt.http.ApiKey();
  const std::string served_name = opt.engine.ServedModelName();

  ShutdownSignals signals;  // before any thread starts
  http::HttpServer server(opt.http.ToServerOptions());
  LateRoutes routes;
  const std::pair<const char*, const char*> kRoutes[] = {
      {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"}, {"GET", "/v1/models"},
      {"GET", "/health"}, {"GET", "/metrics"}};
  for (const auto& [method, path] : kRoutes) server.Route(method, path, routes.Forward(method, path));
  if (Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "tandem run: %s\n", st.ToString().c_str());
    return 1;
  }
  log::info("listening on http://{}:{} (loading the model from {})", opt.http.host, server.port(),
            model_dir);

  const EngineConfig config = opt.engine.ToEngineConfig();
  auto bundle = LoadModelBundle(model_dir, config, /*need_chat_template=*/false);
  if (!bundle.ok()) {
    std::fprintf(stderr, "tandem run: %s\n", bundle.status().ToString().c_str());
    server.Stop();
    return 1;
  }
  const EngineStats stats = bundle->engine->Stats();
  auto engine = std::make_shared<AsyncEngine>(
      std::move(bundle->engine), AsyncEngineOptions{served_name, opt.engine.max_waiting_requests});
  OpenAIServiceOptions service_options;
  service_options.served_model_name = served_name;
  service_options.api_key = api_key;
  auto service = std::make_shared<OpenAIService>(engine, bundle->tokenizer, bundle->renderer,
                                                 service_options);
  service->Register([&routes](std::string method, std::string path, http::Handler handler) {
    routes.Bind(std::move(method), std::move(path), std::move(handler));
  });
  service->SetReady(true);
  log::info("serving '{}' (max_model_len {}, {} KV blocks of {} tokens{}) on http://{}:{}",
            served_name, engine->model_info().max_model_len, stats.num_kv_blocks_total,
            opt.engine.block_size, api_key.empty() ? "" : ", API key required", opt.http.host, server.port());

  log::info("received signal {}, shutting down", signals.Wait());
  service->SetReady(false);
  server.Stop();   // closes connections: running handlers cancel their engine requests
  engine.reset();  // stops the engine thread (after the handlers' io_context stopped running)
  return 0;
}

}  // namespace

Runner RegisterRun(CLI::App& app) {
  auto opt = std::make_shared<RunOptions>();
  app.add_option("--mode", opt->mode, "agg: one process, frontend + one aggregated worker")
      ->check(CLI::IsMember({"agg", "disagg"}));
  AddHttpOptions(app, &opt->http);
  AddEngineOptions(app, &opt->engine);
  return [opt] { return RunAggregated(*opt); };
}

}  // namespace tandem::cli
