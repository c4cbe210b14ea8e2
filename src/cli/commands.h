// `tandem` subcommands. Each Register* adds its options to the CLI11 app and returns the function
// that runs it (exit code).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace tandem::cli {

using Runner = std::function<int()>;

// tandem generate: one prompt through the engine on the CPU, text or JSON out.
Runner RegisterGenerate(CLI::App& app);

// tandem run: the OpenAI-compatible server with its worker(s).
Runner RegisterRun(CLI::App& app);

// tandem worker: one worker process (gRPC request plane, registered in discovery).
Runner RegisterWorker(CLI::App& app);

// tandem frontend: the OpenAI-compatible server over the workers found in discovery.
Runner RegisterFrontend(CLI::App& app);

// tandem serve: a deployment graph (YAML) as supervised child processes (cli/serve.h).
Runner RegisterServe(CLI::App& app);

// tandem k8s render: a deployment graph as Kubernetes manifests (src/deploy/k8s/render.h).
Runner RegisterK8s(CLI::App& app);

// tandem profile: a worker's prefill and decode profile for the SLA planner (planner/profiler.h).
Runner RegisterProfile(CLI::App& app);

// tandem planner: the SLA planner as its own process, scaling Kubernetes Deployments (cli/planner.cc).
Runner RegisterPlanner(CLI::App& app);

// tandem bench: load generator and report against an OpenAI-compatible server (src/loadgen/).
Runner RegisterBench(CLI::App& app);

}  // namespace tandem::cli
