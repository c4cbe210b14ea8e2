// Running a deployment graph (deploy/graph.h) under the supervisor (deploy/supervisor.h): what
// `tandem serve GRAPH.yaml` and `tandem run` (1 prefill + 1 decode) share.
#pragma once

#include <string>

#include "deploy/graph.h"

namespace tandem::cli {

// Runs the graph until SIGINT/SIGTERM/SIGHUP (exit code 0) or a component that cannot be started
// or kept running (1, after stopping the rest). A graph that fails validation or names a missing
// model directory: 2. `log_dir` (optional): each component's output also to <log_dir>/<name>.log.
// Call from the main thread before any other thread starts (the supervisor takes the signals).
int ServeGraph(runtime::Graph graph, const std::string& log_dir);

}  // namespace tandem::cli
