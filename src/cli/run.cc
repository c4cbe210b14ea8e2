// tandem run: the OpenAI-compatible server and its workers, in one command.
//   --mode disagg (the default): 1 prefill + 1 decode worker and a frontend as supervised child
//     processes (a built-in graph run like `tandem serve`, cli/serve.h); engine options go to the
//     workers, HTTP options to the frontend. Its own discovery namespace (run-<pid>) unless
//     --namespace is given.
//   --mode agg: one process holding the OpenAI-compatible frontend and one aggregated worker (the
//     engine on its own thread). /health answers 503 until the model is loaded.
//   --device cpu|cuda:N: the engine's device; in disagg mode every worker's (prefill and decode
//     then share that GPU, each with an equal part of --gpu-memory-utilization unless it is given).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_bundle.h"
#include "cli/router_options.h"
#include "cli/serve.h"
#include "cli/serve_options.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "discovery/etcd_discovery.h"
#include "engine/async_engine.h"
#include "events/event_plane.h"
#include "frontend/errors.h"
#include "frontend/http_server.h"
#include "frontend/openai_server.h"

namespace tandem::cli {
namespace {

struct RunOptions {
  std::string mode = "disagg";
  EngineOptions engine;
  HttpOptions http;
  // disagg only
  int num_prefill = 1;
  int num_decode = 1;
  int max_local_prefill_tokens = -1;  // -1: the decode worker's default
  std::string namespace_name;         // empty: run-<pid>
  std::string discovery;              // "" = the embedded file discovery; etcd://host:port
  std::string event_plane;            // "" = embedded; nats://host:port
  std::string log_dir;
  int migration_limit = 0;            // disagg: the frontend's --migration-limit
  RouterOptions router;               // the frontend's KV router (disagg)
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

// The engine flags given on the command line, as they were given, for the workers.
std::vector<std::pair<std::string, std::string>> GivenEngineFlags(const CLI::App& app) {
  std::vector<std::pair<std::string, std::string>> flags;
  for (const std::string& name : EngineSizeFlagNames()) {
    const CLI::Option* o = app.get_option_no_throw("--" + name);
    if (o && o->count() > 0) flags.emplace_back(name, o->results().back());
  }
  return flags;
}

// --mode disagg: the built-in graph, 1 prefill + 1 decode (by default) behind a frontend.
int RunDisaggregated(const RunOptions& opt, const CLI::App& app) {
  // The frontend process reads them again; a malformed file is refused here, before any process
  // starts (the frontend would otherwise fail and be restarted until the graph gives up).
  if (auto d = opt.http.SamplingDefaultsFor(opt.engine.ModelDir()); !d.ok()) {
    std::fprintf(stderr, "tandem run: %s\n", d.status().ToString().c_str());
    return 1;
  }
  runtime::Graph graph;
  graph.name = "run";
  graph.source = "tandem run";
  graph.namespace_name =
      opt.namespace_name.empty() ? "run-" + std::to_string(getpid()) : opt.namespace_name;
  graph.discovery = opt.discovery;
  graph.event_plane = opt.event_plane;
  if (!opt.engine.model_dir.empty()) {
    graph.model_dir = std::filesystem::absolute(opt.engine.model_dir).lexically_normal().string();
  }
  graph.served_model_name = opt.engine.served_model_name;
  graph.frontend.host = opt.http.host;
  graph.frontend.port = opt.http.port;
  graph.frontend.migration_limit = opt.migration_limit;
  graph.frontend.args = opt.http.FrontendArgs();
  for (std::string& a : opt.router.Args()) graph.frontend.args.push_back(std::move(a));
  // The key travels in the environment, not on a command line that ps shows.
  if (!opt.http.api_key.empty()) graph.frontend.env["TANDEM_API_KEY"] = opt.http.api_key;
  auto engine_flags = GivenEngineFlags(app);
  // Every worker shares the one GPU: unless told otherwise, each gets an equal part of the
  // default fraction (each counts only its own memory against it; kv_cache_sizing.h).
  const int num_workers = opt.num_prefill + opt.num_decode;
  const bool utilization_given =
      std::any_of(engine_flags.begin(), engine_flags.end(),
                  [](const auto& f) { return f.first == "gpu-memory-utilization"; });
  if (opt.engine.device != "cpu" && num_workers > 1 && !utilization_given) {
    const double each = opt.engine.gpu_memory_utilization / num_workers;
    engine_flags.emplace_back("gpu-memory-utilization", fmt::format("{:.4f}", each));
    log::info("{} workers share {}: --gpu-memory-utilization {:.4f} each", num_workers,
              opt.engine.device, each);
  }
  for (const auto& [mode, replicas] :
       {std::pair<std::string, int>{"prefill", opt.num_prefill}, {"decode", opt.num_decode}}) {
    if (replicas == 0) continue;
    runtime::GraphWorkerGroup group;
    group.mode = mode;
    group.replicas = replicas;
    group.devices = {opt.engine.device};
    group.engine = engine_flags;
    if (mode == "decode") group.max_local_prefill_tokens = opt.max_local_prefill_tokens;
    graph.workers.push_back(std::move(group));
  }
  return ServeGraph(std::move(graph), opt.log_dir);
}

int RunAggregated(const RunOptions& opt) {
  const std::string model_dir = opt.engine.ModelDir();
  const std::string api_key = opt.http.ApiKey();
  const std::string served_name = opt.engine.ServedModelName();
  OpenAIServiceOptions service_options;
  if (Status st = opt.http.SetSamplingDefaults(model_dir, &service_options); !st.ok()) {
    std::fprintf(stderr, "tandem run: %s\n", st.ToString().c_str());
    return 1;
  }

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
  const Result<int> device_id = ParseDevice(opt.engine.device);
  auto bundle = device_id.ok() ? LoadModelBundle(model_dir, config, ChatTemplateUse::kIfPresent,
                                                 *device_id)
                               : Result<ModelBundle>(device_id.status());
  if (!bundle.ok()) {
    std::fprintf(stderr, "tandem run: %s\n", bundle.status().ToString().c_str());
    server.Stop();
    return 1;
  }
  const EngineStats stats = bundle->engine->Stats();
  AsyncEngineOptions engine_options;
  engine_options.served_model_name = served_name;
  engine_options.max_waiting_requests = opt.engine.max_waiting_requests;
  auto engine = std::make_shared<AsyncEngine>(std::move(bundle->engine), engine_options);
  service_options.served_model_name = served_name;
  service_options.api_key = api_key;
  opt.http.SetParsers(&service_options);
  // More choices than the engine can ever hold (running + waiting) could only ever be refused as
  // "queue full" (503, retried by clients forever): a 400 naming the limit instead.
  service_options.max_n = std::max(1, std::min(service_options.max_n,
                                               config.max_num_seqs + opt.engine.max_waiting_requests));
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
  app.add_option("--mode", opt->mode,
                 "disagg: a frontend, prefill and decode workers as child processes (default); "
                 "agg: one process, frontend + one aggregated worker")
      ->check(CLI::IsMember({"agg", "disagg"}));
  AddHttpOptions(app, &opt->http);
  AddEngineOptions(app, &opt->engine);
  app.add_option("--num-prefill", opt->num_prefill, "disagg: prefill workers")
      ->check(CLI::Range(0, 64));
  app.add_option("--num-decode", opt->num_decode, "disagg: decode workers")
      ->check(CLI::Range(1, 64));
  app.add_option("--max-local-prefill-tokens", opt->max_local_prefill_tokens,
                 "disagg: prompts shorter than this prefill on the decode worker "
                 "(default: the worker's)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--namespace", opt->namespace_name,
                 "disagg: discovery namespace of the workers (default: run-<pid>, private)");
  app.add_option("--discovery", opt->discovery,
                 "disagg: where the workers register: 'file' (default, embedded), file:///dir or "
                 "etcd://host:port")
      ->check([](const std::string& v) { return runtime::ValidateDiscoveryUrl(v).message(); });
  app.add_option("--event-plane", opt->event_plane,
                 "disagg: where KV events go: 'embedded' (default) or nats://host:port")
      ->check([](const std::string& v) { return runtime::ValidateEventPlaneUrl(v).message(); });
  AddRouterOptions(app, &opt->router);  // disagg: the frontend's choice among decode workers
  app.add_option("--migration-limit", opt->migration_limit,
                 "disagg: times the frontend resubmits a request whose worker died mid-stream "
                 "(default 0: the request fails; agg mode has one in-process worker)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--log-dir", opt->log_dir,
                 "disagg: also write each process's output to DIR/<process>.log");
  const CLI::App* self = &app;
  return [opt, self] {
    if (opt->mode == "disagg") return RunDisaggregated(*opt, *self);
    return RunAggregated(*opt);
  };
}

}  // namespace tandem::cli
