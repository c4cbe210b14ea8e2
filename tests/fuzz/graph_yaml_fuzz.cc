// Deployment graph YAML (deploy/graph.h): ParseGraph of any text (it validates too); a graph that
// parses must expand into its components (with the frontend's port set, as `tandem serve` does)
// and every component must have a name, a mode and arguments.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "deploy/graph.h"

using namespace tandem::runtime;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "graph_yaml_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto graph = ParseGraph(text, "/tmp/graph-fuzz", "fuzz.yaml");
  if (!graph.ok()) {
    Check(!graph.status().message().empty(), "a parse error without a message");
    return 0;
  }
  Check(ValidateGraph(*graph).ok(), "a parsed graph that does not validate");
  if (graph->frontend.port == 0) graph->frontend.port = 8000;
  auto components = ExpandGraph(*graph);
  Check(!components.empty() && components.back().mode == "frontend", "no frontend last");
  for (const auto& c : components) {
    Check(!c.name.empty() && !c.mode.empty() && !c.args.empty(), "a component without name, mode or args");
  }
  return 0;
}
