#include "deploy/graph.h"

#include <filesystem>
#include <regex>
#include <set>

#include <yaml-cpp/yaml.h>

#include "chat_parse/reasoning.h"
#include "chat_parse/tool_calls.h"
#include "common/file_util.h"
#include "deploy/yaml_fields.h"
#include "discovery/etcd_discovery.h"
#include "events/event_plane.h"
#include "router/kv_router.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;

bool IsName(const std::string& s) {
  static const std::regex re("[A-Za-z0-9._-]+");
  return std::regex_match(s, re);
}

bool IsMode(const std::string& s) { return s == "agg" || s == "prefill" || s == "decode"; }

class Parser : public YamlFields {
 public:
  using YamlFields::YamlFields;

  GraphFrontend Frontend(const YAML::Node& n) {
    GraphFrontend f;
    for (const auto& [key, v] :
         Fields(n, "frontend", {"host", "port", "request_timeout_s", "migration_limit", "router_mode",
                                "router_temperature", "kv_overlap_score_weight", "reasoning_parser",
                                "tool_call_parser", "args", "env"})) {
      if (key == "host") f.host = String(v, key);
      if (key == "port") f.port = Int(v, key, 0, 65535);
      if (key == "request_timeout_s") f.request_timeout_s = Number(v, key, 0.001);
      if (key == "migration_limit") f.migration_limit = Int(v, key, 0, 1000);
      if (key == "router_mode") {
        f.router_mode = String(v, key);
        if (!router::ParseRouterMode(f.router_mode).ok()) {
          Fail(v, "'router_mode' must be kv, round-robin or random");
        }
      }
      if (key == "router_temperature") f.router_temperature = Number(v, key, 0);
      if (key == "kv_overlap_score_weight") f.kv_overlap_score_weight = Number(v, key, 0);
      if (key == "reasoning_parser") {
        f.reasoning_parser = String(v, key);
        if (!chat_parse::ParseReasoningFormat(f.reasoning_parser))
          Fail(v, fmt::format("'reasoning_parser' must be one of {}", chat_parse::kReasoningFormatNames));
      }
      if (key == "tool_call_parser") {
        f.tool_call_parser = String(v, key);
        if (!chat_parse::ParseToolCallFormat(f.tool_call_parser))
          Fail(v, fmt::format("'tool_call_parser' must be one of {}", chat_parse::kToolCallFormatNames));
      }
      if (key == "args") f.args = StringList(v, key);
      if (key == "env") f.env = StringMap(v, key);
    }
    return f;
  }

  GraphWorkerGroup Workers(const YAML::Node& n, size_t index) {
    GraphWorkerGroup g;
    g.line = n.Mark().line + 1;
    const std::string what = fmt::format("workers[{}]", index);
    bool has_device = false, has_devices = false;
    YAML::Node mode_node, devices_node, local_node;
    for (const auto& [key, v] :
         Fields(n, what, {"mode", "replicas", "device", "devices", "host", "port", "metrics_port",
                          "max_local_prefill_tokens", "engine", "args", "env"})) {
      if (key == "mode") {
        g.mode = String(v, key);
        mode_node = v;
        if (!IsMode(g.mode)) Fail(v, "bad mode '" + g.mode + "' (agg, prefill or decode)");
      }
      if (key == "replicas") g.replicas = Int(v, key, 1, 1024);
      if (key == "device") {
        g.devices = {String(v, key)};
        has_device = true;
      }
      if (key == "devices") {
        g.devices = StringList(v, key);
        devices_node = v;
        has_devices = true;
        if (g.devices.empty()) Fail(v, "'devices' must not be empty");
      }
      if (key == "host") g.host = String(v, key);
      if (key == "port") g.port = Int(v, key, 0, 65535);
      if (key == "metrics_port") g.metrics_port = Int(v, key, 0, 65535);
      if (key == "max_local_prefill_tokens") {
        g.max_local_prefill_tokens = Int(v, key, 0, 1 << 30);
        local_node = v;
      }
      if (key == "engine") {
        for (const auto& [flag, value] : StringMap(v, key)) {
          if (flag.empty() || flag[0] == '-' || !IsName(flag)) {
            Fail(v, "engine key '" + flag + "' must be a flag name without dashes in front");
          }
          std::string dashed = flag;
          for (char& c : dashed) c = c == '_' ? '-' : c;
          g.engine.emplace_back(dashed, value);
        }
      }
      if (key == "args") g.args = StringList(v, key);
      if (key == "env") g.env = StringMap(v, key);
    }
    if (g.mode.empty()) Fail(n, what + ": 'mode' is required (agg, prefill or decode)");
    if (has_device && has_devices) Fail(n, what + ": give 'device' or 'devices', not both");
    // More devices than replicas: room for a planner to grow the group (ValidateGraph checks).
    if (has_devices && g.devices.size() < static_cast<size_t>(g.replicas)) {
      Fail(devices_node, fmt::format("{}: {} devices for {} replicas (give one per replica, or "
                                     "'device' for all)", what, g.devices.size(), g.replicas));
    }
    if (g.max_local_prefill_tokens >= 0 && g.mode != "decode") {
      Fail(local_node, "'max_local_prefill_tokens' applies to decode workers only");
    }
    return g;
  }

  RestartPolicy Restart(const YAML::Node& n) {
    RestartPolicy r;
    for (const auto& [key, v] :
         Fields(n, "restart", {"max_restarts", "backoff_ms", "max_backoff_ms", "reset_after_s"})) {
      if (key == "max_restarts") r.max_restarts = Int(v, key, 0, 1 << 30);
      if (key == "backoff_ms") r.backoff_ms = Int(v, key, 0, 1 << 30);
      if (key == "max_backoff_ms") r.max_backoff_ms = Int(v, key, 0, 1 << 30);
      if (key == "reset_after_s") r.reset_after_s = Number(v, key, 0);
    }
    return r;
  }

  Graph Parse(const YAML::Node& root, const std::string& base_dir) {
    Graph g;
    g.source = source();
    g.name = fs::path(source()).stem().string();
    if (!root.IsDefined() || root.IsNull()) Fail(root, "the graph is empty");
    bool has_frontend = false, has_workers = false;
    for (const auto& [key, v] :
         Fields(root, "the graph",
                {"name", "namespace", "discovery", "event_plane", "model", "served_model_name",
                 "env", "frontend", "workers", "restart", "startup_timeout_s",
                 "shutdown_grace_s", "kubernetes", "planner"})) {
      // Read by `tandem k8s render` (deploy/k8s/settings.h), not by serve: only its shape is
      // checked here.
      if (key == "kubernetes" && !v.IsMap()) Fail(v, "'kubernetes' must be a mapping");
      if (key == "name") {
        g.name = String(v, key);
        if (!IsName(g.name)) Fail(v, "'name' must match [A-Za-z0-9._-]+");
      }
      if (key == "namespace") {
        g.namespace_name = String(v, key);
        if (!IsName(g.namespace_name)) Fail(v, "'namespace' must match [A-Za-z0-9._-]+");
      }
      if (key == "discovery") {
        g.discovery = String(v, key);
        if (Status st = ValidateDiscoveryUrl(g.discovery); !st.ok()) Fail(v, st.message());
      }
      if (key == "event_plane") {
        g.event_plane = String(v, key);
        if (Status st = ValidateEventPlaneUrl(g.event_plane); !st.ok()) Fail(v, st.message());
      }
      if (key == "model") {
        fs::path model = String(v, key);
        if (model.empty()) Fail(v, "'model' must not be empty");
        if (model.is_relative()) model = fs::path(base_dir.empty() ? "." : base_dir) / model;
        g.model_dir = fs::absolute(model).lexically_normal().string();
      }
      if (key == "served_model_name") g.served_model_name = String(v, key);
      if (key == "env") g.env = StringMap(v, key);
      if (key == "frontend") {
        g.frontend = Frontend(v);
        has_frontend = true;
      }
      if (key == "workers") {
        if (!v.IsSequence() || v.size() == 0) Fail(v, "'workers' must be a non-empty list");
        for (size_t i = 0; i < v.size(); ++i) g.workers.push_back(Workers(v[i], i));
        has_workers = true;
      }
      if (key == "restart") g.restart = Restart(v);
      if (key == "planner") g.planner = ParsePlannerSection(*this, v, base_dir);
      if (key == "startup_timeout_s") g.startup_timeout_s = Number(v, key, 0.001);
      if (key == "shutdown_grace_s") g.shutdown_grace_s = Number(v, key, 0);
    }
    if (!has_frontend) Fail(root, "'frontend' is required (at least {port: N})");
    if (!has_workers) Fail(root, "'workers' is required (a list of worker groups)");
    return g;
  }

};

}  // namespace

int Graph::NumReplicas(const std::string& mode) const {
  int n = 0;
  for (const auto& w : workers) n += w.mode == mode ? w.replicas : 0;
  return n;
}

Result<Graph> ParseGraph(const std::string& yaml_text, const std::string& base_dir,
                         const std::string& source) {
  Graph graph;
  try {
    YAML::Node root = YAML::Load(yaml_text);
    graph = Parser(source).Parse(root, base_dir);
  } catch (const YamlFieldError& e) {
    return e.status;
  } catch (const YAML::Exception& e) {  // syntax errors; mark is 0-based
    if (e.mark.line >= 0) {
      return Err(StatusCode::kInvalidArgument, "{}:{}:{}: bad YAML: {}", source, e.mark.line + 1,
                 e.mark.column + 1, e.msg);
    }
    return Err(StatusCode::kInvalidArgument, "{}: bad YAML: {}", source, e.msg);
  }
  TANDEM_RETURN_IF_ERROR(ValidateGraph(graph));
  return graph;
}

Result<Graph> LoadGraphFile(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  const std::string dir = fs::absolute(fs::path(path)).parent_path().string();
  return ParseGraph(*text, dir, path);
}

namespace {

// The largest replica count a group of `mode` may reach: the planner's maximum for prefill and
// decode groups of a graph with a planner, else 0.
int MaxReplicas(const Graph& g, const std::string& mode) {
  if (!g.planner.enabled) return 0;
  return mode == "prefill" ? g.planner.max_prefill : mode == "decode" ? g.planner.max_decode : 0;
}

template <typename Fail>
Status ValidatePlanner(const Graph& g, Fail fail) {
  const GraphPlanner& p = g.planner;
  int prefill_groups = 0, decode_groups = 0;
  for (const GraphWorkerGroup& w : g.workers) {
    if (w.mode == "agg") return fail(p.line, "planner: a graph with a planner has no agg workers (it sizes prefill and decode)");
    prefill_groups += w.mode == "prefill";
    decode_groups += w.mode == "decode";
  }
  if (prefill_groups != 1 || decode_groups != 1) {
    return fail(p.line, fmt::format("planner: the graph needs exactly one prefill and one decode group (has {} "
                                    "and {})", prefill_groups, decode_groups));
  }
  if (p.min_prefill > p.max_prefill || p.min_decode > p.max_decode || p.min_prefill < 0 || p.min_decode < 0) {
    return fail(p.line, "planner: replica bounds with min above max");
  }
  for (const GraphWorkerGroup& w : g.workers) {
    const int lo = w.mode == "prefill" ? p.min_prefill : p.min_decode;
    const int hi = MaxReplicas(g, w.mode);
    if (w.replicas < lo || w.replicas > hi) {
      return fail(w.line, fmt::format("{} replicas {} outside the planner's bounds [{}, {}]", w.mode,
                                      w.replicas, lo, hi));
    }
  }
  if (p.profile.empty()) return fail(p.line, "planner: 'profile' is required");
  return Status::Ok();
}

}  // namespace

Status ValidateGraph(const Graph& g) {
  auto fail = [&g](int line, const std::string& what) {
    if (line > 0) return Err(StatusCode::kInvalidArgument, "{}:{}: {}", g.source, line, what);
    return Err(StatusCode::kInvalidArgument, "{}: {}", g.source, what);
  };
  if (!IsName(g.name)) return fail(0, "name '" + g.name + "' must match [A-Za-z0-9._-]+");
  if (!IsName(g.namespace_name)) {
    return fail(0, "namespace '" + g.namespace_name + "' must match [A-Za-z0-9._-]+");
  }
  if (Status st = ValidateDiscoveryUrl(g.discovery); !st.ok()) return fail(0, st.message());
  if (Status st = ValidateEventPlaneUrl(g.event_plane); !st.ok()) return fail(0, st.message());
  if (g.frontend.host.empty()) return fail(0, "frontend.host must not be empty");
  if (g.frontend.port < 0 || g.frontend.port > 65535) return fail(0, "frontend.port out of range");
  if (g.workers.empty()) return fail(0, "the graph has no workers");
  std::set<int> ports;
  if (g.frontend.port > 0) ports.insert(g.frontend.port);
  auto claim = [&ports](int base, int n) {
    for (int i = 0; base > 0 && i < n; ++i) {
      if (!ports.insert(base + i).second) return base + i;
    }
    return 0;
  };
  if (g.planner.enabled) TANDEM_RETURN_IF_ERROR(ValidatePlanner(g, fail));
  for (size_t i = 0; i < g.workers.size(); ++i) {
    const GraphWorkerGroup& w = g.workers[i];
    const std::string what = fmt::format("workers[{}] ({})", i, w.mode);
    const int most = std::max(w.replicas, MaxReplicas(g, w.mode));  // the planner may grow it
    if (!IsMode(w.mode)) return fail(w.line, what + ": bad mode (agg, prefill or decode)");
    if (w.replicas < 1) return fail(w.line, what + ": replicas must be at least 1");
    if (w.devices.size() != 1 && w.devices.size() != static_cast<size_t>(std::max(w.replicas, MaxReplicas(g, w.mode)))) {
      return fail(w.line, fmt::format("{}: {} devices for {} replicas{}", what, w.devices.size(),
                                      std::max(w.replicas, MaxReplicas(g, w.mode)),
                                      g.planner.enabled ? " (the planner's maximum)" : ""));
    }
    for (const auto& d : w.devices) {
      if (d.empty()) return fail(w.line, what + ": empty device name");
    }
    if (w.host.empty()) return fail(w.line, what + ": host must not be empty");
    if (w.port < 0 || w.port + most - 1 > 65535 || w.metrics_port < 0 ||
        w.metrics_port + most - 1 > 65535) {
      return fail(w.line, what + ": ports out of range for its replicas");
    }
    if (w.max_local_prefill_tokens >= 0 && w.mode != "decode") {
      return fail(w.line, what + ": max_local_prefill_tokens applies to decode workers only");
    }
    if (int p = claim(w.port, most); p) {
      return fail(w.line, fmt::format("{}: port {} is used twice in the graph", what, p));
    }
    if (int p = claim(w.metrics_port, most); p) {
      return fail(w.line, fmt::format("{}: port {} is used twice in the graph", what, p));
    }
  }
  if (g.NumReplicas("prefill") > 0 && g.NumReplicas("decode") == 0) {
    return fail(0, "prefill workers need at least one decode worker (requests reach prefill "
                   "only through decode)");
  }
  const RestartPolicy& r = g.restart;
  if (r.max_restarts < 0 || r.backoff_ms < 0 || r.max_backoff_ms < 0 || r.reset_after_s < 0) {
    return fail(0, "restart values must not be negative");
  }
  if (!(g.startup_timeout_s > 0)) return fail(0, "startup_timeout_s must be positive");
  if (!(g.shutdown_grace_s >= 0)) return fail(0, "shutdown_grace_s must not be negative");
  return Status::Ok();
}

namespace {

void ModelFlags(const Graph& g, std::vector<std::string>& args) {
  if (!g.discovery.empty()) args.insert(args.end(), {"--discovery", g.discovery});
  if (!g.event_plane.empty()) args.insert(args.end(), {"--event-plane", g.event_plane});
  if (!g.model_dir.empty()) args.insert(args.end(), {"--model", g.model_dir});
  if (!g.served_model_name.empty()) {
    args.insert(args.end(), {"--served-model-name", g.served_model_name});
  }
}

}  // namespace

ComponentSpec ExpandWorker(const Graph& g, size_t group, int r) {
  const GraphWorkerGroup& w = g.workers[group];
  int index = r;
  for (size_t i = 0; i < group; ++i) index += g.workers[i].mode == w.mode ? g.workers[i].replicas : 0;
  ComponentSpec c;
  c.mode = w.mode;
  c.name = fmt::format("{}-{}", w.mode, index);
  c.instance_id = fmt::format("{}-{}", g.name, c.name);
  c.args = {"worker", "--mode", w.mode, "--namespace", g.namespace_name,
            "--host", w.host, "--port", std::to_string(w.port > 0 ? w.port + r : 0),
            "--device", w.DeviceOf(r), "--instance-id", c.instance_id};
  ModelFlags(g, c.args);
  if (w.metrics_port > 0) {
    c.args.insert(c.args.end(), {"--metrics-port", std::to_string(w.metrics_port + r)});
  }
  if (w.max_local_prefill_tokens >= 0) {
    c.args.insert(c.args.end(),
                  {"--max-local-prefill-tokens", std::to_string(w.max_local_prefill_tokens)});
  }
  if (g.planner.enabled) {  // a scale-down lets the worker's requests finish
    c.args.insert(c.args.end(), {"--drain-timeout-s", fmt::format("{}", g.planner.drain_timeout_s)});
  }
  for (const auto& [flag, value] : w.engine) c.args.insert(c.args.end(), {"--" + flag, value});
  c.args.insert(c.args.end(), w.args.begin(), w.args.end());
  c.env = g.env;
  for (const auto& [k, v] : w.env) c.env[k] = v;
  return c;
}

std::vector<ComponentSpec> ExpandGraph(const Graph& g) {
  std::vector<ComponentSpec> out;
  for (size_t i = 0; i < g.workers.size(); ++i) {
    for (int r = 0; r < g.workers[i].replicas; ++r) out.push_back(ExpandWorker(g, i, r));
  }
  ComponentSpec f;
  f.name = f.mode = "frontend";
  f.host = g.frontend.host;
  if (f.host == "0.0.0.0" || f.host.empty()) f.host = "127.0.0.1";
  if (f.host == "::" || f.host == "[::]") f.host = "::1";
  f.port = g.frontend.port;
  f.args = {"frontend", "--host", g.frontend.host, "--port", std::to_string(g.frontend.port),
            "--namespace", g.namespace_name};
  ModelFlags(g, f.args);
  if (g.frontend.request_timeout_s > 0) {
    f.args.insert(f.args.end(), {"--request-timeout-s", fmt::format("{}", g.frontend.request_timeout_s)});
  }
  if (g.frontend.migration_limit > 0) {
    f.args.insert(f.args.end(), {"--migration-limit", std::to_string(g.frontend.migration_limit)});
  }
  if (!g.frontend.router_mode.empty()) {
    f.args.insert(f.args.end(), {"--router-mode", g.frontend.router_mode});
  }
  if (g.frontend.router_temperature >= 0) {
    f.args.insert(f.args.end(),
                  {"--router-temperature", fmt::format("{}", g.frontend.router_temperature)});
  }
  if (!g.frontend.reasoning_parser.empty())
    f.args.insert(f.args.end(), {"--reasoning-parser", g.frontend.reasoning_parser});
  if (!g.frontend.tool_call_parser.empty())
    f.args.insert(f.args.end(), {"--tool-call-parser", g.frontend.tool_call_parser});
  if (g.frontend.kv_overlap_score_weight >= 0) {
    f.args.insert(f.args.end(), {"--kv-overlap-score-weight",
                                 fmt::format("{}", g.frontend.kv_overlap_score_weight)});
  }
  f.args.insert(f.args.end(), g.frontend.args.begin(), g.frontend.args.end());
  f.env = g.env;
  for (const auto& [k, v] : g.frontend.env) f.env[k] = v;
  out.push_back(std::move(f));
  return out;
}

int DecodeLocalPrefillTokens(const Graph& graph) {
  for (const GraphWorkerGroup& w : graph.workers) {
    if (w.mode == "decode") return w.max_local_prefill_tokens >= 0 ? w.max_local_prefill_tokens : kDefaultMaxLocalPrefillTokens;
  }
  return 0;
}

}  // namespace tandem::runtime
