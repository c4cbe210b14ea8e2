// tandem worker --mode agg|prefill|decode: one worker process. The engine (CPU, or the CUDA runner
// with --device cuda:N) on its own thread (AsyncEngine) behind a gRPC server
// (rpc/worker_server.h), registered in discovery as <namespace>/<mode>/<instance_id> with its
// model in the metadata.
//
//   agg      prefill and decode here; the frontend sends it requests.
//   decode   the frontend sends it requests; prompts whose uncached part exceeds
//            --max-local-prefill-tokens are prefilled by a prefill worker (found in discovery),
//            which writes the KV into this worker's blocks through the transfer agent
//            (worker/decode_disagg.h); anything failing on the way falls back to local prefill.
//   prefill  serves Worker.RemotePrefill (worker/prefill_handler.h).
// Prefill and decode workers register their KV pool with a transfer agent (src/transfer; its tcp,
// ucx and libfabric backends on --kv-transfer-host). --metrics-port serves this worker's /metrics
// and /health.
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/model_bundle.h"
#include "cli/serve_options.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "deploy/graph.h"
#include "discovery/etcd_discovery.h"
#include "discovery/file_discovery.h"
#include "engine/async_engine.h"
#include "events/event_plane.h"
#include "events/event_ring.h"
#include "frontend/http_server.h"
#include "rpc/event_plane_factory.h"
#include "rpc/remote_prefill_client.h"
#include "rpc/worker_server.h"
#include "transfer/agent.h"
#ifdef TANDEM_HAVE_CUDA_COPIER
#include "transfer/cuda/cuda_ipc_api.h"
#endif
#include "worker/decode_disagg.h"
#include "worker/kv_event_publisher.h"
#include "worker/prefill_handler.h"
#include "worker/worker_metrics.h"

namespace tandem::cli {
namespace {

struct WorkerOptions {
  std::string mode = "agg";
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 0;
  int max_connections = 1024;  // the gRPC server's cap (WorkerServerOptions::max_connections)
  double drain_timeout_s = 2;  // on SIGTERM: out of discovery, then this long for running calls
  std::string namespace_name = "tandem";
  std::string discovery;    // --discovery: "" = the embedded file discovery, etcd://host:port
  std::string event_plane;  // --event-plane: "" = embedded, nats://host:port
  std::string instance_id;
  int metrics_port = -1;
  int max_local_prefill_tokens = runtime::kDefaultMaxLocalPrefillTokens;
  double remote_prefill_timeout_s = 120;
  std::string kv_transfer_host = "127.0.0.1";
  std::string kv_transfer_backend;  // "" = the agent's choice
  std::vector<std::string> kv_transfer_params;  // BACKEND.KEY=VALUE
  bool kv_transfer_layerwise = true;  // prefill: post each layer's KV as soon as it is computed
  double stats_interval_s = 5;
};

std::string AgentName(const std::string& mode) {
  std::random_device rd;
  return fmt::format("{}-{}-{:08x}", mode, getpid(), rd());
}

// /metrics and /health of this worker on its own port.
std::unique_ptr<http::HttpServer> StartMetricsServer(const WorkerOptions& opt) {
  http::HttpServer::Options o;
  o.host = opt.host;
  o.port = opt.metrics_port;
  o.num_threads = 1;
  auto server = std::make_unique<http::HttpServer>(o);
  server->Route("GET", "/metrics", [](const http::Request&, http::ResponseWriter& w)
                                       -> boost::asio::awaitable<void> {
    co_await w.WriteFull(200, metrics::kTextContentType, metrics::Registry::Default().RenderText());
  });
  server->Route("GET", "/health", [](const http::Request&, http::ResponseWriter& w)
                                      -> boost::asio::awaitable<void> {
    co_await w.WriteFull(200, "application/json", "{\"status\":\"ok\"}");
  });
  if (Status st = server->Start(); !st.ok()) {
    std::fprintf(stderr, "tandem worker: metrics server: %s\n", st.ToString().c_str());
    return nullptr;
  }
  return server;
}

int RunWorker(const WorkerOptions& opt) {
  const Result<int> device_id = ParseDevice(opt.engine.device);
  if (!device_id.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", device_id.status().message().c_str());
    return 2;
  }
  const bool decode = opt.mode == "decode", prefill = opt.mode == "prefill";
  ShutdownSignals signals;  // before any thread starts

  const std::string model_dir = opt.engine.ModelDir();
  const std::string served_name = opt.engine.ServedModelName();
  log::info("worker ({}): loading the model from {} onto {}", opt.mode, model_dir,
            opt.engine.device);
  EngineConfig config = opt.engine.ToEngineConfig();
  if (decode) config.max_local_prefill_tokens = opt.max_local_prefill_tokens;
  auto bundle = LoadModelBundle(model_dir, config, ChatTemplateUse::kIfPresent, *device_id);
  if (!bundle.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", bundle.status().ToString().c_str());
    return 1;
  }
  const EngineStats stats = bundle->engine->Stats();
  const KVCacheLayout layout = bundle->engine->kv_cache_layout();

  // The transfer agent and the KV pool's registration (prefill and decode).
  std::unique_ptr<transfer::Agent> agent;
  std::vector<transfer::Registration> kv_registrations;
  auto relay = std::make_shared<worker::NotificationRelay>();  // the agent's notifications -> DecodeDisagg
  if (decode || prefill) {
    transfer::AgentOptions agent_options;
    agent_options.name = AgentName(opt.mode);
    // Every network backend listens on and advertises the same address.
    for (const char* backend : {"tcp", "ucx", "libfabric"}) {
      agent_options.backend_params[backend]["host"] = opt.kv_transfer_host;
    }
    agent_options.backend_override = opt.kv_transfer_backend;
    for (const std::string& p : opt.kv_transfer_params) {  // checked by the option's validator
      const size_t dot = p.find('.'), eq = p.find('=');
      agent_options.backend_params[p.substr(0, dot)][p.substr(dot + 1, eq - dot - 1)] = p.substr(eq + 1);
    }
    // A decode worker's DecodeDisagg takes kv-ready notifications as outcomes (bound below);
    // transfers are counted per call.
    agent_options.on_notification = [relay](const transfer::Notification& n) { (*relay)(n); };
    agent_options.device_copier = worker::KVDeviceCopier(layout);  // a KV pool on the GPU: host staging
#ifdef TANDEM_HAVE_CUDA_COPIER
    // A KV pool on the GPU: cuda_ipc to workers on this node (the agent picks it for GPU to GPU).
    transfer::RegisterCudaIpcBackend();
    if (layout.device_id >= 0) agent_options.backends.push_back("cuda_ipc");
#endif
    auto created = transfer::Agent::Create(std::move(agent_options));
    if (!created.ok()) {
      std::fprintf(stderr, "tandem worker: transfer agent: %s\n", created.status().ToString().c_str());
      return 1;
    }
    agent = std::move(*created);
    auto regs = worker::RegisterKVCache(*agent, layout);
    if (!regs.ok()) {
      std::fprintf(stderr, "tandem worker: %s\n", regs.status().ToString().c_str());
      return 1;
    }
    kv_registrations = std::move(*regs);
  }

  auto made_discovery = runtime::MakeDiscovery(opt.discovery);
  if (!made_discovery.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", made_discovery.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<runtime::Discovery> discovery = std::move(*made_discovery);
  // The embedded event plane: this worker's events, served by its gRPC server.
  std::shared_ptr<runtime::EventRing> event_ring;
  if (opt.event_plane.empty() || opt.event_plane == "embedded") {
    event_ring = std::make_shared<runtime::EventRing>();
  }
  std::shared_ptr<worker::DecodeDisagg> disagg;
  AsyncEngineOptions engine_options;
  engine_options.served_model_name = served_name;
  engine_options.max_waiting_requests = opt.engine.max_waiting_requests;
  // Every mode publishes its KV events and load (worker/kv_event_publisher.h); declared before the
  // server, which serves its snapshots, so that it outlives it.
  worker::KvEventPublisherOptions publisher_options;
  publisher_options.subject = runtime::KvEventsSubject(opt.namespace_name);
  auto kv_publisher = std::make_shared<worker::KvEventPublisher>(publisher_options);
  engine_options.kv_event_sink = kv_publisher->sink();
  if (decode) {
    runtime::RemotePrefillClientOptions client_options;
    client_options.namespace_name = opt.namespace_name;
    client_options.served_model_name = served_name;
    auto client = std::make_shared<runtime::RemotePrefillClient>(discovery, client_options);
    worker::DecodeDisaggOptions disagg_options;
    disagg_options.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(opt.remote_prefill_timeout_s * 1000));
    disagg_options.write_margin = std::min(disagg_options.write_margin, disagg_options.timeout / 4);
    disagg = std::make_shared<worker::DecodeDisagg>(agent.get(), layout, config.block_size, client,
                                                    disagg_options);
    relay->Bind(disagg);
    engine_options.remote_prefill = [disagg](RemotePrefillTask task,
                                             std::function<void(RemotePrefillOutcome)> done) {
      disagg->Start(std::move(task), std::move(done));
    };
    engine_options.cancel_remote_prefill = [disagg](const std::string& request_id) {
      disagg->Cancel(request_id);
    };
  }
  auto engine = std::make_shared<AsyncEngine>(std::move(bundle->engine), engine_options);
  kv_publisher->AttachEngine(engine);
  const ServedModelInfo info = engine->model_info();
  std::shared_ptr<worker::PrefillHandler> prefill_handler;
  if (prefill) {
    worker::PrefillHandlerOptions handler_options;
    handler_options.layerwise = opt.kv_transfer_layerwise;
    prefill_handler = std::make_shared<worker::PrefillHandler>(engine, agent.get(), handler_options);
  }

  runtime::WorkerServerOptions server_options{opt.host, opt.port, prefill_handler};
  server_options.max_connections = opt.max_connections;
  server_options.events = event_ring;
  server_options.snapshot = kv_publisher->snapshot_provider();
  runtime::WorkerServer server(engine, server_options);
  if (Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", st.ToString().c_str());
    return 1;
  }
  worker::AddWorkerCollector(metrics::Registry::Default(), engine, disagg);
  std::unique_ptr<http::HttpServer> metrics_server;
  if (opt.metrics_port >= 0) {
    metrics_server = StartMetricsServer(opt);
    if (!metrics_server) return 1;
  }
  std::unique_ptr<worker::StatsLogger> stats_logger;
  if ((decode || opt.engine.kv_offload_host_gib > 0) && opt.stats_interval_s > 0) {
    stats_logger = std::make_unique<worker::StatsLogger>(
        engine, disagg,
        std::chrono::milliseconds(static_cast<int64_t>(opt.stats_interval_s * 1000)));
  }

  runtime::InstanceInfo instance;
  instance.namespace_name = opt.namespace_name;
  instance.component = opt.mode;
  instance.instance_id = opt.instance_id;
  instance.endpoint = server.endpoint();
  instance.metadata = {{"model", served_name},
                       {"max_model_len", info.max_model_len},
                       {"vocab_size", info.vocab_size},
                       {"block_size", opt.engine.block_size},
                       {"num_kv_blocks", stats.num_kv_blocks_total},
                       {"device", opt.engine.device},
                       {"pid", static_cast<int64_t>(getpid())}};
  if (agent) instance.metadata["kv_transfer_agent"] = agent->name();
  if (metrics_server) instance.metadata["metrics_port"] = metrics_server->port();
  auto lease = discovery->Register(instance);
  if (!lease.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", lease.status().ToString().c_str());
    return 1;
  }
  // The engine's KV events go out through this plane as this instance (event_plane.h).
  runtime::EventPlaneOptions plane_options;
  plane_options.url = opt.event_plane;
  plane_options.worker_id = (*lease)->info().instance_id;
  plane_options.ring = event_ring;
  auto event_plane = runtime::MakeEventPlane(plane_options);
  if (!event_plane.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", event_plane.status().ToString().c_str());
    return 1;
  }
  const std::string plane_url = (*event_plane)->url();
  kv_publisher->Start(std::shared_ptr<runtime::EventPlane>(std::move(*event_plane)),
                      (*lease)->info().instance_id);
  log::info("worker ({}) serving '{}' on grpc://{} (port {}), instance {}, namespace '{}', "
            "{} KV blocks of {} tokens, discovery {}, event plane {}{}",
            opt.mode, served_name, server.endpoint(), server.port(), (*lease)->info().instance_id,
            opt.namespace_name, stats.num_kv_blocks_total, opt.engine.block_size,
            runtime::DescribeDiscovery(opt.discovery), plane_url,
            metrics_server ? fmt::format(", metrics on http://{}:{}/metrics", opt.host,
                                         metrics_server->port())
                           : "");
  if (decode) {
    log::info("decode: prompts with more than {} uncached tokens are prefilled remotely",
              opt.max_local_prefill_tokens);
  }

  log::info("received signal {}, shutting down", signals.Wait());
  lease->reset();   // leave discovery first: no new requests
  // Running calls get --drain-timeout-s to finish (a planner's scale-down), then are cancelled.
  server.Stop(static_cast<int>(opt.drain_timeout_s * 1000));
  kv_publisher->Stop();
  stats_logger.reset();
  if (metrics_server) metrics_server->Stop();
  if (disagg) disagg->Shutdown();        // remote prefills in flight end (local fallback)
  prefill_handler.reset();               // posted writes end within their window
  kv_registrations.clear();              // no peer writes into the KV pool any more
  agent.reset();
  engine.reset();                        // then the engine (and its KV pool) goes
  return 0;
}

}  // namespace

Runner RegisterWorker(CLI::App& app) {
  auto opt = std::make_shared<WorkerOptions>();
  app.add_option("--mode", opt->mode,
                 "agg: prefill and decode here; prefill: serve remote prefills for decode "
                 "workers; decode: generate, sending long prompts to prefill workers")
      ->check(CLI::IsMember({"agg", "prefill", "decode"}));
  app.add_option("--host", opt->host, "Address of the gRPC server (and the one published)");
  app.add_option("--port", opt->port, "gRPC port (0: any free port, logged)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--drain-timeout-s", opt->drain_timeout_s,
                 "On SIGTERM the worker leaves discovery, then gives its running requests this long to "
                 "finish before cancelling them")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--max-connections", opt->max_connections,
                 "Most TCP connections the gRPC server holds at a time; one beyond is closed at once")
      ->check(CLI::PositiveNumber);
  app.add_option("--namespace", opt->namespace_name, "Discovery namespace");
  app.add_option("--discovery", opt->discovery,
                 "Where workers register: 'file' (default: the embedded file discovery), "
                 "file:///dir or etcd://host:port")
      ->check([](const std::string& v) { return runtime::ValidateDiscoveryUrl(v).message(); });
  app.add_option("--event-plane", opt->event_plane,
                 "Where this worker's KV events go: 'embedded' (default: served by its gRPC "
                 "server) or nats://host:port")
      ->check([](const std::string& v) { return runtime::ValidateEventPlaneUrl(v).message(); });
  app.add_option("--instance-id", opt->instance_id,
                 "Discovery instance id (default: generated, unique)");
  app.add_option("--metrics-port", opt->metrics_port,
                 "Serve this worker's /metrics and /health on this port (0: any free port; "
                 "default: off)")
      ->check(CLI::Range(-1, 65535));
  app.add_option("--max-local-prefill-tokens", opt->max_local_prefill_tokens,
                 "decode: prompts with at most this many uncached tokens are prefilled locally")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--remote-prefill-timeout-s", opt->remote_prefill_timeout_s,
                 "decode: deadline of one remote prefill (then: local prefill)")
      ->check(CLI::PositiveNumber);
  app.add_option("--kv-transfer-host", opt->kv_transfer_host,
                 "Address the transfer agent's network backends (tcp, ucx, libfabric) listen on "
                 "and advertise");
  app.add_option("--kv-transfer-layerwise", opt->kv_transfer_layerwise,
                 "Prefill: send each layer's KV blocks as soon as that layer is computed (true), or "
                 "all of them after the prefill (false)");
  app.add_option("--kv-transfer-backend", opt->kv_transfer_backend,
                 "Force one transfer backend (local, tcp; cuda_ipc, ucx, libfabric when built); default: the "
                 "agent's choice (cuda_ipc for a GPU pool to workers on this node)");
  app.add_option("--kv-transfer-param", opt->kv_transfer_params,
                 "A transfer backend's parameter, BACKEND.KEY=VALUE (repeatable; e.g. cuda_ipc.sm_ctas=0 for "
                 "the copy engines; the keys are in each backend's header, src/transfer/*_backend.h); an "
                 "unknown key stops the worker at start")
      ->check([](const std::string& v) -> std::string {
        const size_t dot = v.find('.'), eq = v.find('=');
        if (dot == std::string::npos || dot == 0 || eq == std::string::npos || eq < dot + 2) {
          return "expected BACKEND.KEY=VALUE, got '" + v + "'";
        }
        return "";
      });
  app.add_option("--stats-interval-s", opt->stats_interval_s,
                 "decode: log the KV transfer lines at most this often (0: never)")
      ->check(CLI::NonNegativeNumber);
  AddEngineOptions(app, &opt->engine);
  return [opt] { return RunWorker(*opt); };
}

}  // namespace tandem::cli
