#include "deploy/k8s/render.h"

#include <cmath>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "deploy/k8s/yaml_emit.h"

namespace tandem::k8s {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr int kFrontendServicePort = 8000;
constexpr int kEtcdPort = 2379;
constexpr int kNatsPort = 4222;
constexpr int kNatsMonitorPort = 8222;

struct Ctx {
  const runtime::Graph& graph;
  const K8sSettings& s;
  std::string name;       // object name prefix
  std::string ns;         // metadata.namespace ("" = none)
  std::string image;
  std::string model;      // container path, "" = the image's bundled model
  std::string etcd_url;
  std::string nats_url;   // "" = the embedded event plane
};

json Metadata(const Ctx& c, const std::string& name, const json& labels) {
  json m;
  m["name"] = name;
  if (!c.ns.empty()) m["namespace"] = c.ns;
  m["labels"] = labels;
  return m;
}

json Labels(const Ctx& c, const std::string& component, const std::string& pool) {
  return json{{"app.kubernetes.io/name", "tandem"},
              {"app.kubernetes.io/instance", c.name},
              {"app.kubernetes.io/component", component},
              {"app.kubernetes.io/part-of", "tandem"},
              {"tandem/pool", pool}};
}

json Selector(const Ctx& c, const std::string& pool) {
  return json{{"app.kubernetes.io/instance", c.name}, {"tandem/pool", pool}};
}

json HttpProbe(const std::string& path, const std::string& port, int period, int failures) {
  return json{{"httpGet", {{"path", path}, {"port", port}}},
              {"periodSeconds", period},
              {"timeoutSeconds", 5},
              {"failureThreshold", failures}};
}

int StartupFailures(const Ctx& c, int period) {
  return std::max(1, static_cast<int>(std::ceil(c.graph.startup_timeout_s / period)));
}

// Environment shared by tandem containers: the graph's env (sorted), then `extra`.
json Env(const std::map<std::string, std::string>& env, const json& extra) {
  json out = json::array();
  for (const auto& item : extra) out.push_back(item);
  std::set<std::string> taken;
  for (const auto& item : extra) taken.insert(item["name"].get<std::string>());
  for (const auto& [k, v] : env) {
    if (!taken.count(k)) out.push_back(json{{"name", k}, {"value", v}});
  }
  return out;
}

// Pod-spec parts common to tandem pods: pull secrets, service account, volumes.
void CommonPodSpec(const Ctx& c, json& spec) {
  if (!c.s.service_account.empty()) spec["serviceAccountName"] = c.s.service_account;
  if (!c.s.image_pull_secrets.empty()) {
    json secrets = json::array();
    for (const auto& n : c.s.image_pull_secrets) secrets.push_back(json{{"name", n}});
    spec["imagePullSecrets"] = secrets;
  }
  // With a planner, a worker taken out first drains for planner.drain_timeout_s.
  const double drain = c.graph.planner.enabled ? c.graph.planner.drain_timeout_s : 0;
  spec["terminationGracePeriodSeconds"] = static_cast<int>(std::ceil(c.graph.shutdown_grace_s + drain));
}

void AddModelCache(const Ctx& c, json& container, json& volumes, json& env_extra) {
  if (c.s.model_cache.claim.empty()) return;
  container["volumeMounts"].push_back(
      json{{"name", "model-cache"}, {"mountPath", c.s.model_cache.mount_path}});
  volumes.push_back(json{{"name", "model-cache"},
                         {"persistentVolumeClaim", {{"claimName", c.s.model_cache.claim}}}});
  env_extra.push_back(json{{"name", "HF_HOME"}, {"value", c.s.model_cache.mount_path}});
}

json EnvFrom(const Ctx& c) {
  json out = json::array();
  if (!c.s.hf_token_secret.empty()) {
    out.push_back(json{{"secretRef", {{"name", c.s.hf_token_secret}, {"optional", true}}}});
  }
  return out;
}

void ModelFlags(const Ctx& c, std::vector<std::string>& args) {
  args.insert(args.end(), {"--discovery", c.etcd_url});
  if (!c.nats_url.empty()) args.insert(args.end(), {"--event-plane", c.nats_url});
  if (!c.model.empty()) args.insert(args.end(), {"--model", c.model});
  if (!c.graph.served_model_name.empty()) {
    args.insert(args.end(), {"--served-model-name", c.graph.served_model_name});
  }
}

// The flags of an ExpandGraph component after the ones rendered here (listen address, ports,
// device, discovery, model...), which ExpandGraph writes first: engine flags, frontend options
// and the graph's extra args, in their order. Keeps `serve` and the pods in step.
std::vector<std::string> TailArgs(const std::vector<std::string>& args) {
  static const std::set<std::string> kRendered = {
      "--mode",  "--namespace", "--host",  "--port",  "--device", "--instance-id",
      "--discovery", "--event-plane", "--model", "--served-model-name", "--metrics-port"};
  size_t i = 1;  // after the subcommand
  while (i + 1 < args.size() && kRendered.count(args[i])) i += 2;
  return std::vector<std::string>(args.begin() + static_cast<long>(std::min(i, args.size())),
                                  args.end());
}

json Pdb(const Ctx& c, const std::string& pool, const std::string& component) {
  return json{{"apiVersion", "policy/v1"},
              {"kind", "PodDisruptionBudget"},
              {"metadata", Metadata(c, pool, Labels(c, component, pool))},
              {"spec",
               {{"maxUnavailable", c.s.max_unavailable},
                {"selector", {{"matchLabels", Selector(c, pool)}}}}}};
}

json Annotations(const Ctx& c, int port) {
  json a = json::object();
  if (c.s.prometheus) {
    a["prometheus.io/scrape"] = "true";
    a["prometheus.io/port"] = std::to_string(port);
    a["prometheus.io/path"] = "/metrics";
  }
  return a;
}

json Deployment(const Ctx& c, const std::string& pool, const std::string& component, int replicas,
                const json& pod_spec, int metrics_port) {
  json tmpl;
  tmpl["metadata"] = json{{"labels", Labels(c, component, pool)}};
  if (json a = Annotations(c, metrics_port); !a.empty()) tmpl["metadata"]["annotations"] = a;
  tmpl["spec"] = pod_spec;
  return json{{"apiVersion", "apps/v1"},
              {"kind", "Deployment"},
              {"metadata", Metadata(c, pool, Labels(c, component, pool))},
              {"spec",
               {{"replicas", replicas},
                {"selector", {{"matchLabels", Selector(c, pool)}}},
                {"template", tmpl}}}};
}

std::vector<json> Frontend(const Ctx& c, const runtime::ComponentSpec& spec_in) {
  const std::string pool = c.name + "-frontend";
  const int port = c.graph.frontend.port > 0 ? c.graph.frontend.port : kFrontendServicePort;
  std::vector<std::string> args = {"frontend", "--host", "0.0.0.0", "--port",
                                   std::to_string(port), "--namespace", c.graph.namespace_name};
  ModelFlags(c, args);
  for (auto& a : TailArgs(spec_in.args)) args.push_back(std::move(a));
  const std::map<std::string, std::string>& env = spec_in.env;

  json container;
  container["name"] = "frontend";
  container["image"] = c.image;
  container["imagePullPolicy"] = c.s.image_pull_policy;
  container["command"] = json::array({"tandem"});
  container["args"] = args;
  container["ports"] = json::array({json{{"name", "http"}, {"containerPort", port}, {"protocol", "TCP"}}});
  json volumes = json::array();
  json env_extra = json::array();
  container["volumeMounts"] = json::array();
  AddModelCache(c, container, volumes, env_extra);
  if (container["volumeMounts"].empty()) container.erase("volumeMounts");
  container["env"] = Env(env, env_extra);
  if (container["env"].empty()) container.erase("env");
  if (json ef = EnvFrom(c); !ef.empty()) container["envFrom"] = ef;
  container["resources"] =
      json{{"requests", {{"cpu", c.s.frontend_cpu}, {"memory", c.s.frontend_memory}}}};
  container["startupProbe"] = HttpProbe("/metrics", "http", 5, StartupFailures(c, 5));
  container["readinessProbe"] = HttpProbe("/health", "http", 5, 3);
  container["livenessProbe"] = HttpProbe("/metrics", "http", 10, 3);

  json spec;
  spec["containers"] = json::array({container});
  if (!volumes.empty()) spec["volumes"] = volumes;
  CommonPodSpec(c, spec);

  json service{{"apiVersion", "v1"},
               {"kind", "Service"},
               {"metadata", Metadata(c, pool, Labels(c, "frontend", pool))},
               {"spec",
                {{"type", c.s.frontend_service_type},
                 {"selector", Selector(c, pool)},
                 {"ports", json::array({json{{"name", "http"},
                                             {"port", kFrontendServicePort},
                                             {"targetPort", "http"},
                                             {"protocol", "TCP"}}})}}}};
  return {Deployment(c, pool, "frontend", c.s.frontend_replicas, spec, port), service,
          Pdb(c, pool, "frontend")};
}

json Affinity(const Ctx& c, const std::string& mode) {
  json affinity = json::object();
  const bool disagg = mode == "prefill" || mode == "decode";
  if (disagg && c.s.anti_affinity != "none") {
    const std::string other = mode == "prefill" ? "decode" : "prefill";
    json term{{"labelSelector",
               {{"matchLabels",
                 {{"app.kubernetes.io/instance", c.name}, {"app.kubernetes.io/component", other}}}}},
              {"topologyKey", "kubernetes.io/hostname"}};
    if (c.s.anti_affinity == "required") {
      affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
          json::array({term});
    } else {
      affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] =
          json::array({json{{"weight", 100}, {"podAffinityTerm", term}}});
    }
  }
  if (disagg && c.s.same_zone) {
    json term{{"labelSelector",
               {{"matchLabels", {{"app.kubernetes.io/instance", c.name}}},
                {"matchExpressions",
                 json::array({json{{"key", "app.kubernetes.io/component"},
                                   {"operator", "In"},
                                   {"values", json::array({"prefill", "decode"})}}})}}},
              {"topologyKey", "topology.kubernetes.io/zone"}};
    affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json::array({term});
  }
  return affinity;
}

Result<std::vector<json>> WorkerPool(const Ctx& c, const runtime::GraphWorkerGroup& w,
                                     const runtime::ComponentSpec& first, const std::string& pool) {
  auto fail = [&](const std::string& what) {
    return Err(StatusCode::kInvalidArgument, "{}:{}: workers ({}): {}", c.graph.source, w.line,
               w.mode, what);
  };
  bool cuda = false, cpu = false;
  for (const auto& d : w.devices) {
    if (d.rfind("cuda", 0) == 0) {
      cuda = true;
    } else if (d == "cpu") {
      cpu = true;
    } else {
      return fail("device '" + d + "' is neither cpu nor cuda[:N]");
    }
  }
  if (cuda && cpu) {
    return fail("a Deployment's pods are alike: its devices must be all cpu or all cuda");
  }
  bool backend_in_args = false;
  for (const auto& a : w.args) {
    backend_in_args = backend_in_args || a.rfind("--kv-transfer-backend", 0) == 0;
  }
  // EFA selects the libfabric backend for workers whose KV pool is host memory. The libfabric
  // backend does not move GPU memory yet (transfer/libfabric_backend.h), so cuda workers keep the
  // agent's choice (cuda_ipc on a node, tcp with host staging between nodes) and only get the
  // EFA devices and FI_PROVIDER.
  const bool force_libfabric = c.s.efa > 0 && w.mode != "agg" && !cuda;
  if (backend_in_args && force_libfabric) {
    return fail("--kv-transfer-backend in args conflicts with kubernetes.efa (which selects "
                "libfabric for cpu workers)");
  }
  const int mport = c.s.metrics_port;
  std::vector<std::string> args = {"worker", "--mode", w.mode, "--namespace",
                                   c.graph.namespace_name, "--host", "$(POD_IP)", "--port",
                                   std::to_string(c.s.grpc_port), "--device",
                                   cuda ? "cuda:0" : "cpu"};
  ModelFlags(c, args);
  args.insert(args.end(), {"--metrics-port", std::to_string(mport)});
  if (w.mode != "agg") args.insert(args.end(), {"--kv-transfer-host", "$(POD_IP)"});
  if (force_libfabric) args.insert(args.end(), {"--kv-transfer-backend", "libfabric"});
  for (auto& a : TailArgs(first.args)) args.push_back(std::move(a));
  const std::map<std::string, std::string>& env = first.env;
  json env_extra = json::array(
      {json{{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}});
  if (c.s.efa > 0) env_extra.push_back(json{{"name", "FI_PROVIDER"}, {"value", "efa"}});

  json container;
  container["name"] = w.mode;
  container["image"] = c.image;
  container["imagePullPolicy"] = c.s.image_pull_policy;
  container["command"] = json::array({"tandem"});
  container["args"] = args;
  container["ports"] = json::array(
      {json{{"name", "grpc"}, {"containerPort", c.s.grpc_port}, {"protocol", "TCP"}},
       json{{"name", "metrics"}, {"containerPort", mport}, {"protocol", "TCP"}}});
  json volumes = json::array(
      {json{{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", c.s.shm_size}}}}});
  container["volumeMounts"] = json::array({json{{"name", "dshm"}, {"mountPath", "/dev/shm"}}});
  AddModelCache(c, container, volumes, env_extra);
  container["env"] = Env(env, env_extra);
  if (json ef = EnvFrom(c); !ef.empty()) container["envFrom"] = ef;
  json resources{{"requests", {{"cpu", c.s.worker_cpu}, {"memory", c.s.worker_memory}}}};
  if (cuda) resources["limits"]["nvidia.com/gpu"] = std::to_string(c.s.worker_gpus);
  if (c.s.efa > 0) {
    resources["requests"]["vpc.amazonaws.com/efa"] = std::to_string(c.s.efa);
    resources["limits"]["vpc.amazonaws.com/efa"] = std::to_string(c.s.efa);
  }
  container["resources"] = resources;
  container["startupProbe"] = HttpProbe("/health", "metrics", 10, StartupFailures(c, 10));
  container["readinessProbe"] = HttpProbe("/health", "metrics", 5, 3);
  container["livenessProbe"] = HttpProbe("/health", "metrics", 10, 3);

  json spec;
  spec["containers"] = json::array({container});
  spec["volumes"] = volumes;
  if (json a = Affinity(c, w.mode); !a.empty()) spec["affinity"] = a;
  if (!c.s.node_selector.empty()) spec["nodeSelector"] = json(c.s.node_selector);
  json tolerations = json::array();
  if (c.s.has_tolerations) {
    for (const auto& t : c.s.tolerations) {
      json tj;
      if (!t.key.empty()) tj["key"] = t.key;
      tj["operator"] = t.op;
      if (!t.value.empty()) tj["value"] = t.value;
      if (!t.effect.empty()) tj["effect"] = t.effect;
      tolerations.push_back(tj);
    }
  } else if (cuda) {
    tolerations.push_back(
        json{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}});
  }
  if (!tolerations.empty()) spec["tolerations"] = tolerations;
  CommonPodSpec(c, spec);
  return std::vector<json>{Deployment(c, pool, w.mode, w.replicas, spec, mport),
                           Pdb(c, pool, w.mode)};
}

// A one-replica StatefulSet and its headless Service (the StatefulSet's serviceName).
std::vector<json> Server(const Ctx& c, const std::string& component, const std::string& image,
                         const std::vector<std::string>& command, const std::vector<std::string>& args, const json& ports,
                         const json& probe_get) {
  const std::string pool = c.name + "-" + component;
  json svc_ports = json::array();
  for (const auto& p : ports) {
    svc_ports.push_back(json{{"name", p["name"]}, {"port", p["containerPort"]},
                             {"targetPort", p["name"]}, {"protocol", "TCP"}});
  }
  json service{{"apiVersion", "v1"},
               {"kind", "Service"},
               {"metadata", Metadata(c, pool, Labels(c, component, pool))},
               {"spec", {{"clusterIP", "None"}, {"selector", Selector(c, pool)}, {"ports", svc_ports}}}};
  json container{{"name", component},
                 {"image", image},
                 {"imagePullPolicy", "IfNotPresent"},
                 {"command", command},
                 {"args", args},
                 {"ports", ports},
                 {"volumeMounts", json::array({json{{"name", "data"}, {"mountPath", "/data"}}})},
                 {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "256Mi"}}}}},
                 {"readinessProbe", {{"httpGet", probe_get}, {"periodSeconds", 5}}},
                 {"livenessProbe", {{"httpGet", probe_get}, {"periodSeconds", 10},
                                    {"failureThreshold", 6}}}};
  if (command.empty()) container.erase("command");
  json tmpl{{"metadata", {{"labels", Labels(c, component, pool)}}},
            {"spec",
             {{"containers", json::array({container})},
              {"volumes", json::array({json{{"name", "data"}, {"emptyDir", json::object()}}})}}}};
  json sts{{"apiVersion", "apps/v1"},
           {"kind", "StatefulSet"},
           {"metadata", Metadata(c, pool, Labels(c, component, pool))},
           {"spec",
            {{"serviceName", pool},
             {"replicas", 1},
             {"selector", {{"matchLabels", Selector(c, pool)}}},
             {"template", tmpl}}}};
  return {service, sts};
}

std::string ContainerModel(const runtime::Graph& g, const K8sSettings& s, Status* error) {
  if (!s.model.empty()) return s.model;
  if (s.graph_model_raw.empty()) return "";
  if (!s.model_cache.claim.empty()) {
    std::string folder = fs::path(g.model_dir).filename().string();
    return (fs::path(s.model_cache.mount_path) / folder).string();
  }
  if (!s.graph_model_raw.empty() && s.graph_model_raw[0] == '/') return s.graph_model_raw;
  *error = Err(StatusCode::kInvalidArgument,
               "{}: the graph's model '{}' is a path on this machine: set kubernetes.model (its "
               "path inside the containers) or kubernetes.model_cache",
               g.source, s.graph_model_raw);
  return "";
}

}  // namespace

// The SLA planner (graph planner section): `tandem planner` scaling the prefill and decode
// Deployments, with a ServiceAccount allowed to get and update their scale subresource (a Role and
// RoleBinding) and the profile in a ConfigMap.
Result<std::vector<json>> Planner(const Ctx& c, const std::string& prefill_pool, const std::string& decode_pool) {
  const runtime::GraphPlanner& p = c.graph.planner;
  auto profile = ReadFile(p.profile);
  if (!profile.ok()) return Err(StatusCode::kNotFound, "planner profile {}: {}", p.profile, profile.status().message());
  if (c.ns.empty()) {
    return Err(StatusCode::kInvalidArgument, "{}: a graph with a planner needs kubernetes.namespace (or "
               "--namespace): its RoleBinding names the ServiceAccount's namespace", c.graph.source);
  }
  const std::string pool = c.name + "-planner";
  const json labels = Labels(c, "planner", pool);
  json config_map{{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", Metadata(c, pool, labels)},
                  {"data", {{"profile.json", *profile}}}};
  json account{{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", Metadata(c, pool, labels)}};
  json role{{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "Role"}, {"metadata", Metadata(c, pool, labels)},
            {"rules", json::array({json{{"apiGroups", json::array({"apps"})},
                                        {"resources", json::array({"deployments/scale"})},
                                        {"resourceNames", json::array({prefill_pool, decode_pool})},
                                        {"verbs", json::array({"get", "update"})}}})}};
  json binding{{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "RoleBinding"},
               {"metadata", Metadata(c, pool, labels)},
               {"roleRef", {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", pool}}},
               {"subjects", json::array({json{{"kind", "ServiceAccount"}, {"name", pool}, {"namespace", c.ns}}})}};
  const int port = p.metrics_port > 0 ? p.metrics_port : c.s.metrics_port;
  std::vector<std::string> args = {
      "planner", "--profile", "/etc/tandem/planner/profile.json",
      "--ttft-ms", fmt::format("{}", p.ttft_ms), "--itl-ms", fmt::format("{}", p.itl_ms),
      "--interval-s", fmt::format("{}", p.interval_s),
      "--prefill-min", std::to_string(p.min_prefill), "--prefill-max", std::to_string(p.max_prefill),
      "--decode-min", std::to_string(p.min_decode), "--decode-max", std::to_string(p.max_decode),
      "--budget", std::to_string(p.budget), "--predictor", p.predictor,
      "--scale-down-intervals", std::to_string(p.scale_down_intervals), "--cooldown-s", fmt::format("{}", p.cooldown_s),
      "--frontend-url", fmt::format("http://{}-frontend:{}", c.name, kFrontendServicePort),
      "--metrics-port", std::to_string(port), "--prefill-deployment", prefill_pool,
      "--decode-deployment", decode_pool, "--k8s-namespace", c.ns};
  args.insert(args.end(), {"--local-prefill-tokens", std::to_string(runtime::DecodeLocalPrefillTokens(c.graph))});
  if (!p.correction) args.push_back("--no-correction");
  json container{{"name", "planner"}, {"image", c.image}, {"imagePullPolicy", c.s.image_pull_policy},
                 {"command", json::array({"tandem"})}, {"args", args},
                 {"ports", json::array({json{{"name", "metrics"}, {"containerPort", port}, {"protocol", "TCP"}}})},
                 {"volumeMounts", json::array({json{{"name", "profile"}, {"mountPath", "/etc/tandem/planner"},
                                                    {"readOnly", true}}})},
                 {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "128Mi"}}}}},
                 {"readinessProbe", HttpProbe("/health", "metrics", 10, 3)},
                 {"livenessProbe", HttpProbe("/health", "metrics", 10, 3)}};
  json spec{{"serviceAccountName", pool}, {"containers", json::array({container})},
            {"volumes", json::array({json{{"name", "profile"}, {"configMap", {{"name", pool}}}}})}};
  if (!c.s.image_pull_secrets.empty()) {
    json secrets = json::array();
    for (const auto& n : c.s.image_pull_secrets) secrets.push_back(json{{"name", n}});
    spec["imagePullSecrets"] = secrets;
  }
  return std::vector<json>{config_map, account, role, binding, Deployment(c, pool, "planner", 1, spec, port)};
}

Result<std::string> RenderManifests(const runtime::Graph& graph, const K8sSettings& settings,
                                    const RenderOptions& options) {
  Ctx c{graph, settings, {}, {}, {}, {}, {}, {}};
  c.name = settings.name.empty() ? graph.name : settings.name;
  if (!IsDnsLabel(c.name) || c.name.size() > 40) {
    return Err(StatusCode::kInvalidArgument,
               "{}: '{}' is not usable as a Kubernetes name prefix (a DNS-1123 label of at most 40 "
               "characters: lowercase letters, digits, '-'); set kubernetes.name",
               graph.source, c.name);
  }
  c.ns = options.namespace_name.empty() ? settings.namespace_name : options.namespace_name;
  if (!c.ns.empty() && !IsDnsLabel(c.ns)) {
    return Err(StatusCode::kInvalidArgument, "namespace '{}' is not a DNS-1123 label", c.ns);
  }
  c.image = options.image.empty() ? settings.image : options.image;
  Status model_error;
  c.model = ContainerModel(graph, settings, &model_error);
  if (!model_error.ok()) return model_error;
  const bool own_etcd = settings.etcd_url.empty();
  const bool own_nats = settings.nats_enabled && settings.nats_url.empty();
  c.etcd_url = own_etcd ? fmt::format("etcd://{}-etcd:{}", c.name, kEtcdPort) : settings.etcd_url;
  c.nats_url = !settings.nats_enabled ? ""
               : own_nats            ? fmt::format("nats://{}-nats:{}", c.name, kNatsPort)
                                     : settings.nats_url;

  std::vector<json> docs;
  if (!settings.model_cache.claim.empty() && !settings.model_cache.size.empty()) {
    json spec{{"accessModes", json::array({"ReadWriteMany"})},
              {"resources", {{"requests", {{"storage", settings.model_cache.size}}}}}};
    if (!settings.model_cache.storage_class.empty()) {
      spec["storageClassName"] = settings.model_cache.storage_class;
    }
    docs.push_back(json{{"apiVersion", "v1"},
                        {"kind", "PersistentVolumeClaim"},
                        {"metadata", Metadata(c, settings.model_cache.claim,
                                              Labels(c, "model-cache", settings.model_cache.claim))},
                        {"spec", spec}});
  }
  if (own_etcd) {
    const std::string host = c.name + "-etcd";
    for (auto& d : Server(c, "etcd", settings.etcd_image, {"etcd"},  // the image has no entrypoint
                          {"--name=etcd-0", "--data-dir=/data",
                           fmt::format("--listen-client-urls=http://0.0.0.0:{}", kEtcdPort),
                           fmt::format("--advertise-client-urls=http://{}:{}", host, kEtcdPort),
                           "--listen-peer-urls=http://0.0.0.0:2380"},
                          json::array({json{{"name", "client"}, {"containerPort", kEtcdPort}}}),
                          json{{"path", "/health"}, {"port", "client"}})) {
      docs.push_back(std::move(d));
    }
  }
  if (own_nats) {
    for (auto& d : Server(c, "nats", settings.nats_image, {"nats-server"},
                          {fmt::format("--port={}", kNatsPort),
                           fmt::format("--http_port={}", kNatsMonitorPort)},
                          json::array({json{{"name", "client"}, {"containerPort", kNatsPort}},
                                       json{{"name", "monitor"}, {"containerPort", kNatsMonitorPort}}}),
                          json{{"path", "/healthz"}, {"port", "monitor"}})) {
      docs.push_back(std::move(d));
    }
  }
  runtime::Graph expand = graph;
  if (expand.frontend.port <= 0) expand.frontend.port = kFrontendServicePort;
  const std::vector<runtime::ComponentSpec> specs = runtime::ExpandGraph(expand);
  for (auto& d : Frontend(c, specs.back())) docs.push_back(std::move(d));
  std::map<std::string, int> groups_of_mode, index_of_mode;
  for (const auto& w : graph.workers) ++groups_of_mode[w.mode];
  size_t first_spec = 0;  // ExpandGraph: workers in file order, replica order
  for (const auto& w : graph.workers) {
    std::string pool = c.name + "-" + w.mode;
    if (groups_of_mode[w.mode] > 1) pool += "-" + std::to_string(index_of_mode[w.mode]++);
    auto pool_docs = WorkerPool(c, w, specs.at(first_spec), pool);
    first_spec += static_cast<size_t>(w.replicas);
    if (!pool_docs.ok()) return pool_docs.status();
    for (auto& d : *pool_docs) docs.push_back(std::move(d));
  }
  if (graph.planner.enabled) {  // one prefill and one decode group (graph_planner.h)
    auto planner_docs = Planner(c, c.name + "-prefill", c.name + "-decode");
    if (!planner_docs.ok()) return planner_docs.status();
    for (auto& d : *planner_docs) docs.push_back(std::move(d));
  }

  std::string out = fmt::format(
      "# Kubernetes manifests of the tandem graph '{}'{}, rendered by `tandem k8s render`.\n"
      "# Generated: re-render instead of editing. Apply: kubectl apply -f <this file>\n",
      graph.name, options.source_name.empty() ? "" : " (" + options.source_name + ")");
  for (const auto& d : docs) out += "---\n" + EmitYaml(d);
  return out;
}

Result<std::string> RenderGraphFile(const std::string& path, RenderOptions options) {
  auto graph = runtime::LoadGraphFile(path);
  if (!graph.ok()) return graph.status();
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  auto settings = ParseK8sSettings(*text, path);
  if (!settings.ok()) return settings.status();
  if (options.source_name.empty()) options.source_name = fs::path(path).filename().string();
  return RenderManifests(*graph, *settings, options);
}

}  // namespace tandem::k8s
