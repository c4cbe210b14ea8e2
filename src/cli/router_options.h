// The KV router's flags (Dynamo's names), shared by `tandem frontend`, `tandem run` and the graph
// keys of `tandem serve` (deploy/graph.h): --router-mode kv|round-robin|random (default kv),
// --router-temperature T (>= 0, default 0), --kv-overlap-score-weight W (>= 0, default 1).
// Their meaning: router/kv_router.h.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "router/kv_router.h"

namespace tandem::cli {

struct RouterOptions {
  std::string mode = "kv";
  double temperature = 0.0;
  double overlap_weight = 1.0;
  double host_hit_weight = 0.8;  // KvRouterConfig's: a host-tier hit against a pool hit
  double disk_hit_weight = 0.5;

  // Sets mode, temperature, overlap_weight and the tier hit weights of `config`; InvalidArgument
  // for a bad value.
  Status ToConfig(router::KvRouterConfig* config) const;
  // The flags that reproduce these options on a `tandem frontend` command line.
  std::vector<std::string> Args() const;
};

void AddRouterOptions(CLI::App& app, RouterOptions* options);

}  // namespace tandem::cli
