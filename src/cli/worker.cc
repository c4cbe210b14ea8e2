// tandem worker --mode agg: one aggregated worker process. The CPU engine on its own thread
// (AsyncEngine) behind a gRPC server (runtime/worker_server.h), registered in discovery as
// <namespace>/agg/<instance_id> with its model in the metadata, so that `tandem frontend` finds it.
// Prefill and decode modes come with the disaggregated flow (issue 5, items 3-4).
#include <cstdio>
#include <memory>
#include <string>

#include <unistd.h>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/serve_options.h"
#include "cli/model_bundle.h"
#include "common/logging.h"
#include "engine/async_engine.h"
#include "runtime/file_discovery.h"
#include "runtime/worker_server.h"

namespace tandem::cli {
namespace {

struct WorkerOptions {
  std::string mode = "agg";
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 0;
  std::string namespace_name = "tandem";
  std::string device = "cpu";
  std::string instance_id;
};

int RunWorker(const WorkerOptions& opt) {
  if (opt.mode != "agg") {
    std::fprintf(stderr, "tandem worker: --mode %s is not available yet; use --mode agg\n",
                 opt.mode.c_str());
    return 2;
  }
  if (opt.device != "cpu") {
    std::fprintf(stderr, "tandem worker: --device %s is not available yet; use --device cpu\n",
                 opt.device.c_str());
    return 2;
  }
  ShutdownSignals signals;  // before any thread starts

  const std::string model_dir = opt.engine.ModelDir();
  const std::string served_name = opt.engine.ServedModelName();
  log::info("worker ({}): loading the model from {}", opt.mode, model_dir);
  auto bundle = LoadModelBundle(model_dir, opt.engine.ToEngineConfig(), /*need_chat_template=*/false);
  if (!bundle.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", bundle.status().ToString().c_str());
    return 1;
  }
  const EngineStats stats = bundle->engine->Stats();
  auto engine = std::make_shared<AsyncEngine>(
      std::move(bundle->engine), AsyncEngineOptions{served_name, opt.engine.max_waiting_requests});
  const ServedModelInfo info = engine->model_info();

  runtime::WorkerServer server(engine, runtime::WorkerServerOptions{opt.host, opt.port});
  if (Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", st.ToString().c_str());
    return 1;
  }
  auto discovery = runtime::MakeFileDiscovery();
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
                       {"device", opt.device},
                       {"pid", static_cast<int64_t>(getpid())}};
  auto lease = discovery->Register(instance);
  if (!lease.ok()) {
    std::fprintf(stderr, "tandem worker: %s\n", lease.status().ToString().c_str());
    return 1;
  }
  log::info("worker ({}) serving '{}' on grpc://{} (port {}), instance {}, namespace '{}', "
            "{} KV blocks of {} tokens, discovery {}",
            opt.mode, served_name, server.endpoint(), server.port(), (*lease)->info().instance_id,
            opt.namespace_name, stats.num_kv_blocks_total, opt.engine.block_size,
            runtime::DefaultDiscoveryDir());

  log::info("received signal {}, shutting down", signals.Wait());
  lease->reset();   // leave discovery first: no new requests
  server.Stop();    // running calls get a grace period, then are cancelled
  return 0;         // the engine stops after the server (declared before it)
}

}  // namespace

Runner RegisterWorker(CLI::App& app) {
  auto opt = std::make_shared<WorkerOptions>();
  app.add_option("--mode", opt->mode, "agg: prefill and decode in this worker")
      ->check(CLI::IsMember({"agg", "prefill", "decode"}));
  app.add_option("--host", opt->host, "Address of the gRPC server (and the one published)");
  app.add_option("--port", opt->port, "gRPC port (0: any free port, logged)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--namespace", opt->namespace_name, "Discovery namespace");
  app.add_option("--device", opt->device, "cpu (cuda:N later)");
  app.add_option("--instance-id", opt->instance_id,
                 "Discovery instance id (default: generated, unique)");
  AddEngineOptions(app, &opt->engine);
  return [opt] { return RunWorker(*opt); };
}

}  // namespace tandem::cli
