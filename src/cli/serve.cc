// tandem serve GRAPH.yaml: starts a deployment graph's components (frontend; agg, prefill and
// decode worker replicas) as child processes, waits until each is ready, restarts the ones that
// die and stops everything on Ctrl-C or SIGTERM. The graph format: src/deploy/graph.h and
// deploy/README.md; the process rules: src/deploy/supervisor.h.
#include "cli/serve.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "deploy/local_connector.h"
#include "deploy/supervisor.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;

struct ServeOptions {
  std::string graph_path;
  std::string host;          // overrides frontend.host when set
  int port = -1;             // overrides frontend.port when >= 0
  std::string model_dir;     // overrides model (relative to the working directory)
  std::string namespace_name;
  std::string discovery;     // overrides the graph's discovery when set
  std::string event_plane;   // overrides the graph's event_plane when set
  std::string log_dir;
  bool dry_run = false;
};

std::string Quoted(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t'\"\\$`") == std::string::npos) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int Serve(const ServeOptions& opt) {
  auto graph = runtime::LoadGraphFile(opt.graph_path);
  if (!graph.ok()) {
    std::fprintf(stderr, "tandem serve: %s\n", graph.status().ToString().c_str());
    return 2;
  }
  if (!opt.host.empty()) graph->frontend.host = opt.host;
  if (opt.port >= 0) graph->frontend.port = opt.port;
  if (!opt.model_dir.empty()) graph->model_dir = fs::absolute(opt.model_dir).lexically_normal().string();
  if (!opt.namespace_name.empty()) graph->namespace_name = opt.namespace_name;
  if (!opt.discovery.empty()) graph->discovery = opt.discovery;
  if (!opt.event_plane.empty()) graph->event_plane = opt.event_plane;
  if (Status st = runtime::ValidateGraph(*graph); !st.ok()) {
    std::fprintf(stderr, "tandem serve: %s\n", st.ToString().c_str());
    return 2;
  }
  if (opt.dry_run) {
    std::printf("# graph '%s' from %s: the commands tandem serve runs\n", graph->name.c_str(),
                graph->source.c_str());
    for (const runtime::ComponentSpec& c : runtime::ExpandGraph(*graph)) {
      std::string line;
      for (const auto& [k, v] : c.env) line += k + "=" + Quoted(v) + " ";
      line += "tandem";
      for (const auto& a : c.args) line += " " + Quoted(a);
      std::printf("%-12s %s\n", c.name.c_str(), line.c_str());
    }
    return 0;
  }
  return ServeGraph(std::move(*graph), opt.log_dir);
}

}  // namespace

int ServeGraph(runtime::Graph graph, const std::string& log_dir) {
  if (Status st = runtime::ValidateGraph(graph); !st.ok()) {
    std::fprintf(stderr, "tandem: %s\n", st.ToString().c_str());
    return 2;
  }
  const std::string model_dir = graph.model_dir.empty() ? DefaultModelDir() : graph.model_dir;
  if (!fs::is_directory(model_dir)) {
    std::fprintf(stderr, "tandem: %s: model directory %s does not exist\n", graph.source.c_str(),
                 model_dir.c_str());
    return 2;
  }
  runtime::SupervisorOptions options;
  options.log_dir = log_dir;
  std::unique_ptr<runtime::LocalPlanner> planner;  // the graph's SLA planner, started once it is up
  options.on_ready = [&planner] {
    if (!planner) return;
    if (Status st = planner->Start(); !st.ok()) log::error("planner not started: {}", st.message());
  };
  const runtime::Graph graph_copy = graph;
  runtime::Supervisor supervisor(std::move(graph), options);
  if (graph_copy.planner.enabled) {
    auto made = runtime::LocalPlanner::Create(graph_copy, &supervisor);
    if (!made.ok()) {
      std::fprintf(stderr, "tandem: %s: %s\n", graph_copy.source.c_str(), made.status().message().c_str());
      return 2;
    }
    planner = std::move(*made);
  }
  Status st = supervisor.Run();
  planner.reset();
  if (!st.ok()) {
    std::fprintf(stderr, "tandem: %s\n", st.message().c_str());
    return 1;
  }
  log::info("every component stopped");
  return 0;
}

Runner RegisterServe(CLI::App& app) {
  auto opt = std::make_shared<ServeOptions>();
  app.add_option("graph", opt->graph_path, "Deployment graph (YAML; see deploy/README.md)")
      ->required();
  app.add_option("--host", opt->host, "Frontend address (overrides frontend.host)");
  app.add_option("--port", opt->port, "Frontend port (overrides frontend.port; 0: a free one)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--model", opt->model_dir, "Model directory (overrides the graph's model)");
  app.add_option("--namespace", opt->namespace_name, "Discovery namespace (overrides the graph's)");
  app.add_option("--discovery", opt->discovery,
                 "Discovery of every component: file, file:///dir or etcd://host:port "
                 "(overrides the graph's)");
  app.add_option("--event-plane", opt->event_plane,
                 "Event plane of every component: embedded or nats://host:port (overrides the "
                 "graph's)");
  app.add_option("--log-dir", opt->log_dir,
                 "Also write each component's output to DIR/<component>.log");
  app.add_flag("--dry-run", opt->dry_run, "Check the graph and print the commands it would run");
  return [opt] { return Serve(*opt); };
}

}  // namespace tandem::cli
