// tandem frontend: the OpenAI-compatible HTTP server over the request plane. Tokenizer and chat
// template from --model (only those files are read; no weights), requests to the workers found in
// discovery (rpc/remote_engine_client.h), each placed by the KV router (router/kv_routing.h:
// --router-mode kv|round-robin|random, --router-temperature, --kv-overlap-score-weight; KV events
// from --event-plane). /health answers 200 while at least one worker is live, 503 otherwise, its
// body naming the live workers per pool ({"status":"unhealthy","reason":"no live decode worker",
// "pools":{"decode":0,"prefill":1}}); a request (or a migration) that finds no live worker waits
// up to --wait-for-worker-s (default 5) for one, then gets 503 (a migration: its 500). While prefill workers are live, each request also carries the
// prefill worker the same router mode chose among them (router/prefill_router.h), for the decode
// worker's remote prefill.
//
// /metrics: the OpenAI metrics (frontend/openai_metrics.h) with tandem_kv_blocks_used/_total and
// the request gauges summed over the workers (their Health RPC, polled every 0.5 s), plus per
// worker: tandem_worker_kv_blocks_used{worker="<instance_id>"}, tandem_worker_kv_blocks_total,
// tandem_worker_num_requests_running, and tandem_workers (live workers); the router's
// tandem_router_* series (kv_routing.h).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>


#include "chat/template.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_bundle.h"
#include "cli/router_options.h"
#include "cli/serve_options.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "discovery/etcd_discovery.h"
#include "discovery/file_discovery.h"
#include "events/event_plane.h"
#include "frontend/http_server.h"
#include "frontend/openai_server.h"
#include "router/kv_routing.h"
#include "router/prefill_router.h"
#include "rpc/event_plane_factory.h"
#include "rpc/migrating_engine_client.h"
#include "rpc/remote_engine_client.h"
#include "tokenizer/tokenizer.h"

namespace tandem::cli {
namespace {

struct FrontendOptions {
  std::string model_dir;
  std::string served_model_name;
  std::string namespace_name = "tandem";
  std::string discovery;    // --discovery: "" = the embedded file discovery, etcd://host:port
  std::string event_plane;  // --event-plane: "" = embedded, nats://host:port
  std::string component = "auto";
  double request_timeout_s = 3600;
  double wait_for_worker_s = 5;  // --wait-for-worker-s (RemoteEngineClientOptions::wait_for_worker)
  int migration_limit = 0;  // --migration-limit (rpc/migrating_engine_client.h)
  HttpOptions http;
  RouterOptions router;
};

// Readiness follows the number of live workers; the service may not exist yet when it changes.
class Readiness {
 public:
  void SetWorkers(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    num_workers_ = n;
    if (service_) service_->SetReady(n > 0);
  }
  void Attach(OpenAIService* service) {
    std::lock_guard<std::mutex> lock(mu_);
    service_ = service;
    if (service_) service_->SetReady(num_workers_ > 0);
  }

 private:
  std::mutex mu_;
  int num_workers_ = 0;
  OpenAIService* service_ = nullptr;
};

// /health: the live workers of each pool; unhealthy while none takes requests (agg or decode).
HealthReport FrontendHealth(const std::weak_ptr<runtime::RemoteEngineClient>& client,
                            const std::shared_ptr<runtime::PrefillRouter>& prefill_router) {
  HealthReport r;
  r.pools["decode"] = 0;
  r.pools["prefill"] = prefill_router ? static_cast<int>(prefill_router->workers().size()) : 0;
  int live = 0;
  bool agg_seen = false, decode_seen = false;
  if (auto c = client.lock()) {
    for (const runtime::RemoteWorkerStatus& w : c->Workers()) {
      agg_seen = agg_seen || w.instance.component == runtime::kComponentAgg;
      decode_seen = decode_seen || w.instance.component == runtime::kComponentDecode;
      r.pools[w.instance.component] += w.healthy;  // (a known agg pool shows, at 0 too)
      live += w.healthy;
    }
  }
  r.healthy = live > 0;
  if (!r.healthy) {
    r.reason = !agg_seen && (decode_seen || r.pools["prefill"] > 0) ? "no live decode worker" : "no live worker";
  }
  return r;
}

int RunFrontend(const FrontendOptions& opt) {
  EngineOptions names;
  names.model_dir = opt.model_dir;
  names.served_model_name = opt.served_model_name;
  const std::string model_dir = names.ModelDir();
  const std::string served_name = names.ServedModelName();
  const std::string api_key = opt.http.ApiKey();
  OpenAIServiceOptions service_options;
  if (Status st = opt.http.SetSamplingDefaults(model_dir, &service_options); !st.ok()) {
    std::fprintf(stderr, "tandem frontend: %s\n", st.ToString().c_str());
    return 1;
  }
  ShutdownSignals signals;  // before any thread starts

  auto text = LoadTextBundle(model_dir, ChatTemplateUse::kIfPresent);
  if (!text.ok()) {
    std::fprintf(stderr, "tandem frontend: %s\n", text.status().ToString().c_str());
    return 1;
  }
  const std::shared_ptr<const Tokenizer> tokenizer = text->tokenizer;
  runtime::RemoteEngineClientOptions client_options;
  client_options.namespace_name = opt.namespace_name;
  if (opt.component != "auto") client_options.components = {opt.component};
  client_options.served_model_name = served_name;
  client_options.request_timeout =
      std::chrono::milliseconds(static_cast<int64_t>(opt.request_timeout_s * 1000));
  client_options.wait_for_worker =
      std::chrono::milliseconds(static_cast<int64_t>(opt.wait_for_worker_s * 1000));
  client_options.fallback_model_info.name = served_name;
  client_options.fallback_model_info.vocab_size = tokenizer->vocab_size();
  // Until a worker says otherwise: the model's own context length.
  client_options.fallback_model_info.max_model_len = 1 << 30;
  if (auto config = ReadJsonFile(model_dir + "/config.json"); config.ok()) {
    client_options.fallback_model_info.max_model_len =
        config->value("max_position_embeddings", 1 << 30);
  }
  auto readiness = std::make_shared<Readiness>();
  client_options.on_workers_changed = [readiness, served_name](int n) {
    log::info("{} live worker(s) for '{}'", n, served_name);
    readiness->SetWorkers(n);
  };

  http::HttpServer server(opt.http.ToServerOptions());

  auto made_discovery = runtime::MakeDiscovery(opt.discovery);
  if (!made_discovery.ok()) {
    std::fprintf(stderr, "tandem frontend: %s\n", made_discovery.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<runtime::Discovery> discovery = std::move(*made_discovery);
  // Where the workers' KV events are read (the router subscribes to KvEventsSubject here).
  runtime::EventPlaneOptions plane_options;
  plane_options.url = opt.event_plane;
  plane_options.discovery = discovery;
  plane_options.namespace_name = opt.namespace_name;
  auto event_plane = runtime::MakeEventPlane(plane_options);
  if (!event_plane.ok()) {
    std::fprintf(stderr, "tandem frontend: %s\n", event_plane.status().ToString().c_str());
    return 1;
  }
  metrics::Registry& registry = metrics::Registry::Default();
  runtime::KvRoutingOptions routing_options;
  routing_options.namespace_name = opt.namespace_name;
  routing_options.metrics = &registry;
  if (Status st = opt.router.ToConfig(&routing_options.router); !st.ok()) {
    std::fprintf(stderr, "tandem frontend: %s\n", st.ToString().c_str());
    return 2;
  }
  std::shared_ptr<runtime::EventPlane> plane(std::move(*event_plane));
  // One subscription to the workers' KV events, shared by the decode and the prefill routers.
  auto kv_feed = runtime::KvEventFeed::Create(plane, opt.namespace_name);
  if (!kv_feed.ok()) {
    std::fprintf(stderr, "tandem frontend: %s\n", kv_feed.status().ToString().c_str());
    return 1;
  }
  auto routing = runtime::KvRouting::Create(*kv_feed, routing_options);
  if (!routing.ok()) {
    std::fprintf(stderr, "tandem frontend: %s\n", routing.status().ToString().c_str());
    return 1;
  }
  client_options.selector = *routing;
  log::info("router: {}", (*routing)->Describe());
  auto client = std::make_shared<runtime::RemoteEngineClient>(discovery, client_options);
  // Request migration: a request whose worker is lost mid-stream continues on another one.
  runtime::MigratingEngineClientOptions migration_options;
  migration_options.migration_limit = opt.migration_limit;
  migration_options.registry = &metrics::Registry::Default();
  std::weak_ptr<runtime::RemoteEngineClient> refresh_client = client;
  migration_options.before_retry = [refresh_client] {
    // The dead worker is marked unhealthy (its Health fails at once) before a new one is picked.
    if (auto c = refresh_client.lock()) c->Refresh();
  };
  auto served_client = std::make_shared<runtime::MigratingEngineClient>(client, migration_options);
  // The prefill worker of each request (router/prefill_router.h): the same router mode over the
  // prefill pool, its choice sent to the decode worker as the request's prefill_worker_id.
  std::shared_ptr<runtime::PrefillRouter> prefill_router;
  auto prefill_routed = runtime::WithPrefillRouting(served_client, discovery, *kv_feed,
                                                    routing_options, served_name, &prefill_router);
  if (!prefill_routed.ok()) {
    std::fprintf(stderr, "tandem frontend: %s\n", prefill_routed.status().ToString().c_str());
    return 1;
  }
  service_options.served_model_name = served_name;
  service_options.api_key = api_key;
  opt.http.SetParsers(&service_options);
  auto service = std::make_shared<OpenAIService>(*prefill_routed, tokenizer, text->renderer, service_options,
                                                 &registry);
  std::weak_ptr<runtime::RemoteEngineClient> weak_client = client;
  registry.AddCollector([weak_client, &registry] {
    auto c = weak_client.lock();
    if (!c) return;
    int live = 0;
    for (const runtime::RemoteWorkerStatus& w : c->Workers()) {
      const metrics::Labels labels{{"worker", w.instance.instance_id}};
      const EngineStats& s = w.stats.engine;
      live += w.healthy;
      registry.GetGauge("tandem_worker_kv_blocks_used", "KV blocks in use, per worker", labels)
          .Set(w.healthy ? s.num_kv_blocks_used : 0);
      registry.GetGauge("tandem_worker_kv_blocks_total", "KV pool size in blocks, per worker",
                        labels).Set(w.healthy ? s.num_kv_blocks_total : 0);
      registry.GetGauge("tandem_worker_num_requests_running", "Running requests, per worker",
                        labels).Set(w.healthy ? s.num_running : 0);
    }
    registry.GetGauge("tandem_workers", "Live workers this frontend sends requests to").Set(live);
  });
  service->Register([&server](std::string method, std::string path, http::Handler handler) {
    server.Route(std::move(method), std::move(path), std::move(handler));
  });
  readiness->Attach(service.get());
  service->SetHealthReport([weak_client, prefill_router] { return FrontendHealth(weak_client, prefill_router); });
  if (Status st = server.Start(); !st.ok()) {
    readiness->Attach(nullptr);
    std::fprintf(stderr, "tandem frontend: %s\n", st.ToString().c_str());
    return 1;
  }
  log::info("frontend serving '{}' on http://{}:{} (workers: {}/{} in {}, event plane {}{})", served_name,
            opt.http.host, server.port(), opt.namespace_name, opt.component == "auto" ? "agg|decode" : opt.component,
            runtime::DescribeDiscovery(opt.discovery), opt.event_plane.empty() ? "embedded" : opt.event_plane, api_key.empty() ? "" : ", API key required");

  log::info("received signal {}, shutting down", signals.Wait());
  readiness->Attach(nullptr);
  service->SetReady(false);
  server.Stop();  // closes connections: running handlers cancel their requests
  return 0;       // then the client cancels what is left and waits for it
}

}  // namespace

Runner RegisterFrontend(CLI::App& app) {
  auto opt = std::make_shared<FrontendOptions>();
  app.add_option("--model", opt->model_dir,
                 "Model directory for the tokenizer and chat template (default: the bundled "
                 "tiny Qwen3)");
  app.add_option("--served-model-name", opt->served_model_name,
                 "Model id in the API; only workers serving it are used (default: the model "
                 "directory's name)");
  AddHttpOptions(app, &opt->http);
  app.add_option("--namespace", opt->namespace_name, "Discovery namespace of the workers");
  app.add_option("--discovery", opt->discovery,
                 "Where workers are found: 'file' (default: the embedded file discovery), "
                 "file:///dir or etcd://host:port")
      ->check([](const std::string& v) { return runtime::ValidateDiscoveryUrl(v).message(); });
  app.add_option("--event-plane", opt->event_plane,
                 "Where the workers' KV events are read: 'embedded' (default) or nats://host:port")
      ->check([](const std::string& v) { return runtime::ValidateEventPlaneUrl(v).message(); });
  AddRouterOptions(app, &opt->router);
  app.add_option("--component", opt->component,
                 "Worker component to send requests to (auto: agg and decode workers)")
      ->check(CLI::IsMember({"auto", "agg", "decode"}));
  app.add_option("--migration-limit", opt->migration_limit,
                 "Times a request whose worker dies mid-stream is resubmitted to another worker, "
                 "continuing from the tokens already streamed (default 0: the request fails)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--wait-for-worker-s", opt->wait_for_worker_s,
                 "How long a request (or a migration) that finds no live worker waits for one "
                 "before failing (503), in seconds; 0: fail at once")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--request-timeout-s", opt->request_timeout_s,
                 "Deadline of each request at the workers, in seconds")
      ->check(CLI::Range(0.001, 1e9));
  return [opt] { return RunFrontend(*opt); };
}

}  // namespace tandem::cli
