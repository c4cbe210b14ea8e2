// tandem: the command-line entry point.
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  tandem::log::Init();
  CLI::App app{"tandem: an LLM server with disaggregated prefill and decode"};
  app.require_subcommand(1);
  std::map<CLI::App*, tandem::cli::Runner> runners;
  {
    CLI::App* sub = app.add_subcommand("generate", "Generate text for one prompt (CPU engine)");
    runners[sub] = tandem::cli::RegisterGenerate(*sub);
  }
  {
    CLI::App* sub = app.add_subcommand("run", "Serve a model over the OpenAI API");
    runners[sub] = tandem::cli::RegisterRun(*sub);
  }
  {
    CLI::App* sub = app.add_subcommand("serve", "Run a deployment graph (frontend + workers)");
    runners[sub] = tandem::cli::RegisterServe(*sub);
  }
  {
    CLI::App* sub = app.add_subcommand("worker", "Run one worker (gRPC, found through discovery)");
    runners[sub] = tandem::cli::RegisterWorker(*sub);
  }
  {
    CLI::App* sub = app.add_subcommand("frontend", "Serve the OpenAI API over the workers");
    runners[sub] = tandem::cli::RegisterFrontend(*sub);
  }
  {
    CLI::App* sub = app.add_subcommand("k8s", "Kubernetes manifests of a deployment graph");
    runners[sub] = tandem::cli::RegisterK8s(*sub);
  }
  {
    CLI::App* sub = app.add_subcommand("profile", "Measure a worker's prefill and decode profile (SLA planner)");
    runners[sub] = tandem::cli::RegisterProfile(*sub);
  }
  {
    CLI::App* sub = app.add_subcommand("planner", "Run the SLA planner against Kubernetes Deployments");
    runners[sub] = tandem::cli::RegisterPlanner(*sub);
  }
  {
    CLI::App* sub = app.add_subcommand("bench", "Benchmark an OpenAI-compatible server");
    runners[sub] = tandem::cli::RegisterBench(*sub);
  }
  bool known = false;
  for (const auto& [sub, run] : runners) known = known || (argc > 1 && sub->get_name() == argv[1]);
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "tandem: unknown command '%s' (see tandem --help)\n", argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every usage error exits 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) return run();
  }
  return 2;
}
