// A deployment graph: which components `tandem serve` starts (one frontend; groups of agg, prefill
// and decode worker replicas), with their model, devices, ports and restart policy. Read from YAML
// (yaml-cpp); `tandem run` builds one in code. deploy/README.md shows every key with an example.
//
//   name: disagg-1p1d                # [A-Za-z0-9._-]+; default: the file's stem
//   namespace: tandem                # discovery namespace of the workers (default tandem)
//   discovery: etcd://127.0.0.1:2379 # optional: every component's --discovery (default: the
//                                    # embedded file discovery; etcd_discovery.h MakeDiscovery)
//   event_plane: nats://127.0.0.1:4222  # optional: every component's --event-plane (default
//                                    # embedded; event_plane.h)
//   model: ../models/tiny-qwen3      # model directory; a relative path is resolved against the
//                                    # graph file's folder; omitted: the bundled tiny Qwen3
//   served_model_name: tiny-qwen3    # optional (default: the model directory's name)
//   env: {TANDEM_LOG_LEVEL: info}    # optional, for every component
//   frontend:                        # required
//     host: 127.0.0.1                # listen address (default 127.0.0.1)
//     port: 8000                     # 0: a free port picked at start (default 8000)
//     request_timeout_s: 3600        # optional
//     migration_limit: 1             # optional: --migration-limit (default 0: no migration)
//     router_mode: kv                # optional: kv | round-robin | random (--router-mode)
//     router_temperature: 0          # optional, >= 0 (--router-temperature)
//     kv_overlap_score_weight: 1     # optional, >= 0 (--kv-overlap-score-weight)
//     reasoning_parser: qwen3        # optional: qwen3 | deepseek_r1 | none (--reasoning-parser)
//     tool_call_parser: hermes       # optional: hermes | qwen3_coder | llama3_json | mistral |
//                                    #   pythonic | none (--tool-call-parser)
//     args: [--http-threads, "4"]    # optional extra flags, passed as they are
//     env: {...}                     # optional
//   workers:                         # required, at least one group
//     - mode: prefill                # agg | prefill | decode
//       replicas: 2                  # >= 1 (default 1)
//       device: cpu                  # one device for every replica (default cpu), or
//       devices: [cuda:0, cuda:1]    #   one per replica (as many as replicas); passed to --device
//       host: 127.0.0.1              # gRPC address (default 127.0.0.1)
//       port: 0                      # 0: any free port (default); N: replica i gets N + i
//       metrics_port: 0              # 0: none (default); N: replica i gets --metrics-port N + i
//       max_local_prefill_tokens: 64 # decode only: prompts with at most this many uncached
//                                    # tokens prefill on decode, longer ones on a prefill worker
//       engine: {block_size: 16, kv_cache_gib: 0.5}   # engine flags: key k -> --k (_ as -)
//       args: [...]                  # optional extra flags
//       env: {...}                   # optional
//   restart:                         # optional
//     max_restarts: 5                # restarts of one component in a row before serve gives up
//     backoff_ms: 1000               # first delay; doubles per restart in a row, up to
//     max_backoff_ms: 30000
//     reset_after_s: 60              # ready this long: the count in a row starts again
//   startup_timeout_s: 600           # every component ready within this, else serve fails
//   shutdown_grace_s: 10             # SIGTERM, then SIGKILL after this
//   planner: {...}                   # optional: the SLA planner sizes the prefill and decode
//                                    # groups while serve runs (deploy/graph_planner.h)
//   kubernetes: {...}                # optional; ignored by serve, read by `tandem k8s render`
//                                    # (src/deploy/k8s/settings.h lists its keys)
//
// Rules (ParseGraph / ValidateGraph answer InvalidArgument, naming the file and line): unknown
// keys, wrong types, duplicate keys, bad discovery / event_plane URLs, bad modes, replicas < 1, devices not matching replicas, no
// frontend, no workers, prefill workers without decode workers, max_local_prefill_tokens outside
// decode groups, bad names.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "deploy/graph_planner.h"

namespace tandem::runtime {

struct GraphFrontend {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: pick a free port when the graph starts
  double request_timeout_s = 0;    // 0: the frontend's default
  int migration_limit = 0;         // --migration-limit; 0: not passed (no migration)
  std::string router_mode;         // empty: the frontend's default (kv)
  double router_temperature = -1;  // < 0: the frontend's default (0)
  double kv_overlap_score_weight = -1;  // < 0: the frontend's default (1)
  std::string reasoning_parser;    // empty: the frontend's default (from the chat template)
  std::string tool_call_parser;    // empty: the frontend's default (from the chat template)
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
};

struct GraphWorkerGroup {
  std::string mode;                      // "agg", "prefill", "decode"
  int replicas = 1;
  std::vector<std::string> devices = {"cpu"};  // one (shared) or one per replica
  std::string host = "127.0.0.1";
  int port = 0;                          // 0: any; else replica i listens on port + i
  int metrics_port = 0;                  // 0: not passed; else replica i gets metrics_port + i
  int max_local_prefill_tokens = -1;     // -1: not passed (kDefaultMaxLocalPrefillTokens)
  std::vector<std::pair<std::string, std::string>> engine;  // flag name (no --) -> value
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  int line = 0;                          // 1-based line of the group in its file (0: built in)

  const std::string& DeviceOf(int replica) const {
    return devices.size() == 1 ? devices[0] : devices[replica];
  }
};

struct RestartPolicy {
  int max_restarts = 5;
  int backoff_ms = 1000;
  int max_backoff_ms = 30000;
  double reset_after_s = 60;
};

struct Graph {
  std::string name = "graph";
  std::string namespace_name = "tandem";
  std::string discovery;           // empty: the embedded file discovery
  std::string event_plane;         // empty: the embedded event plane
  std::string model_dir;           // absolute, or empty: the bundled model
  std::string served_model_name;   // empty: the worker's / frontend's default
  std::map<std::string, std::string> env;
  GraphFrontend frontend;
  std::vector<GraphWorkerGroup> workers;
  RestartPolicy restart;
  GraphPlanner planner;            // enabled: the `planner:` section was given
  double startup_timeout_s = 600;
  double shutdown_grace_s = 10;
  std::string source = "<built-in>";  // the file it came from, for messages

  int NumReplicas(const std::string& mode) const;
};

// Parses YAML text. `base_dir` resolves a relative `model`; `source` names the text in errors and
// gives the default name (its stem). Errors: InvalidArgument "<source>:<line>: <what>".
Result<Graph> ParseGraph(const std::string& yaml_text, const std::string& base_dir,
                         const std::string& source);
// Reads and parses a file (NotFound when missing).
Result<Graph> LoadGraphFile(const std::string& path);
// The rules above (ParseGraph calls it; code-built graphs should too).
Status ValidateGraph(const Graph& graph);

// One process of a graph, ready to exec: `<tandem binary> args...` with env added.
struct ComponentSpec {
  std::string name;          // "frontend", "<mode>-<replica>" (e.g. "decode-1")
  std::string mode;          // "frontend", "agg", "prefill", "decode"
  std::string instance_id;   // workers: "<graph name>-<mode>-<replica>" (discovery id)
  std::vector<std::string> args;  // after the binary, e.g. {"worker", "--mode", "decode", ...}
  std::map<std::string, std::string> env;
  std::string host;          // frontend: where /health is asked (a wildcard becomes loopback)
  int port = 0;              // frontend: its HTTP port
};

// Workers first (in file order, replica order), the frontend last. The frontend's port must be
// set (non-zero) by then.
std::vector<ComponentSpec> ExpandGraph(const Graph& graph);
// `tandem worker --max-local-prefill-tokens`' default: a decode worker prefills prompts with at
// most this many uncached tokens itself.
inline constexpr int kDefaultMaxLocalPrefillTokens = 1000;
// The decode group's max_local_prefill_tokens (the default when not set; 0 without a decode group).
int DecodeLocalPrefillTokens(const Graph& graph);
// Replica `replica` (0-based) of group `group` as ExpandGraph makes it, for groups that grow while
// the graph runs (the planner): its name is "<mode>-<index>" with index = the replica's index among
// every group of that mode before it plus `replica`.
ComponentSpec ExpandWorker(const Graph& graph, size_t group, int replica);

}  // namespace tandem::runtime
