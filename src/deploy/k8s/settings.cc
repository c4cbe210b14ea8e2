#include "deploy/k8s/settings.h"

#include <regex>
#include <set>

#include <yaml-cpp/yaml.h>

#include "deploy/yaml_fields.h"

namespace tandem::k8s {
namespace {

// The kubernetes: section's reads: the graph's checks (deploy/yaml_fields.h) and its own.
class Reader : public runtime::YamlFields {
 public:
  using YamlFields::YamlFields;

  std::string Quantity(const YAML::Node& n, const std::string& key) {
    std::string q = String(n, key);
    if (!IsQuantity(q)) Fail(n, "'" + key + "' must be a Kubernetes quantity like 16Gi, 500m or 2 (got '" + q + "')");
    return q;
  }
  std::string Name(const YAML::Node& n, const std::string& key) {
    std::string s = String(n, key);
    if (!IsDnsLabel(s)) {
      Fail(n, "'" + key + "' must be a DNS-1123 label (lowercase letters, digits, '-') (got '" +
                  s + "')");
    }
    return s;
  }
  std::string Url(const YAML::Node& n, const std::string& key, const std::string& scheme) {
    std::string s = String(n, key);
    static const std::regex re("[a-z]+://[A-Za-z0-9.-]+:[0-9]{1,5}");
    if (s.rfind(scheme + "://", 0) != 0 || !std::regex_match(s, re)) {
      Fail(n, "'" + key + "' must look like " + scheme + "://host:port (got '" + s + "')");
    }
    return s;
  }

  void Read(const YAML::Node& k, K8sSettings& s) {
    for (const auto& [key, v] : Fields(k, "kubernetes",
             {"name", "namespace", "image", "image_pull_policy", "image_pull_secrets",
              "service_account", "model", "model_cache", "hf_token_secret", "shm_size",
              "grpc_port", "metrics_port", "frontend", "workers", "efa", "anti_affinity",
              "same_zone", "node_selector", "tolerations", "etcd", "nats", "max_unavailable",
              "prometheus"})) {
      if (key == "name") {
        s.name = Name(v, key);
        if (s.name.size() > 40) Fail(v, "'name' must be at most 40 characters");
      }
      if (key == "namespace") s.namespace_name = Name(v, key);
      if (key == "image") {
        s.image = String(v, key);
        if (s.image.empty()) Fail(v, "'image' must not be empty");
      }
      if (key == "image_pull_policy") {
        s.image_pull_policy = OneOf(v, key, {"Always", "IfNotPresent", "Never"});
      }
      if (key == "image_pull_secrets") {
        if (!v.IsSequence()) Fail(v, "'image_pull_secrets' must be a list");
        for (const auto& item : v) s.image_pull_secrets.push_back(Name(item, key));
      }
      if (key == "service_account") s.service_account = Name(v, key);
      if (key == "model") {
        s.model = String(v, key);
        if (s.model.empty() || s.model[0] != '/') Fail(v, "'model' must be an absolute path inside the container");
      }
      if (key == "model_cache") {
        bool has_claim = false;
        for (const auto& [ck, cv] : Fields(v, "kubernetes.model_cache",
                                           {"claim", "mount_path", "size", "storage_class"})) {
          if (ck == "claim") {
            s.model_cache.claim = Name(cv, ck);
            has_claim = true;
          }
          if (ck == "mount_path") {
            s.model_cache.mount_path = String(cv, ck);
            if (s.model_cache.mount_path.empty() || s.model_cache.mount_path[0] != '/') {
              Fail(cv, "'mount_path' must be an absolute path");
            }
          }
          if (ck == "size") s.model_cache.size = Quantity(cv, ck);
          if (ck == "storage_class") s.model_cache.storage_class = Name(cv, ck);
        }
        if (!has_claim) Fail(v, "kubernetes.model_cache: 'claim' is required");
      }
      if (key == "hf_token_secret") {
        s.hf_token_secret = String(v, key);
        if (!s.hf_token_secret.empty() && !IsDnsLabel(s.hf_token_secret)) {
          Fail(v, "'hf_token_secret' must be a DNS-1123 name or \"\"");
        }
      }
      if (key == "shm_size") s.shm_size = Quantity(v, key);
      if (key == "grpc_port") s.grpc_port = Int(v, key, 1, 65535);
      if (key == "metrics_port") s.metrics_port = Int(v, key, 1, 65535);
      if (key == "frontend") {
        for (const auto& [fk, fv] : Fields(v, "kubernetes.frontend",
                                           {"replicas", "service_type", "cpu", "memory"})) {
          if (fk == "replicas") s.frontend_replicas = Int(fv, fk, 0, 1024);
          if (fk == "service_type") {
            s.frontend_service_type = OneOf(fv, fk, {"ClusterIP", "NodePort", "LoadBalancer"});
          }
          if (fk == "cpu") s.frontend_cpu = Quantity(fv, fk);
          if (fk == "memory") s.frontend_memory = Quantity(fv, fk);
        }
      }
      if (key == "workers") {
        for (const auto& [wk, wv] : Fields(v, "kubernetes.workers", {"cpu", "memory", "gpus"})) {
          if (wk == "cpu") s.worker_cpu = Quantity(wv, wk);
          if (wk == "memory") s.worker_memory = Quantity(wv, wk);
          if (wk == "gpus") s.worker_gpus = Int(wv, wk, 1, 64);
        }
      }
      if (key == "efa") s.efa = Int(v, key, 0, 64);
      if (key == "anti_affinity") s.anti_affinity = OneOf(v, key, {"preferred", "required", "none"});
      if (key == "same_zone") s.same_zone = Bool(v, key);
      if (key == "node_selector") {
        if (!v.IsMap()) Fail(v, "'node_selector' must be a mapping");
        for (auto it = v.begin(); it != v.end(); ++it) {
          s.node_selector[String(it->first, key)] = String(it->second, key);
        }
      }
      if (key == "tolerations") {
        if (!v.IsSequence()) Fail(v, "'tolerations' must be a list");
        s.has_tolerations = true;
        for (const auto& item : v) {
          Toleration t;
          for (const auto& [tk, tv] : Fields(item, "a toleration",
                                             {"key", "operator", "value", "effect"})) {
            if (tk == "key") t.key = String(tv, tk);
            if (tk == "operator") t.op = OneOf(tv, tk, {"Exists", "Equal"});
            if (tk == "value") t.value = String(tv, tk);
            if (tk == "effect") t.effect = OneOf(tv, tk, {"NoSchedule", "PreferNoSchedule", "NoExecute"});
          }
          if (t.op == "Exists" && !t.value.empty()) Fail(item, "a toleration with operator Exists takes no value");
          s.tolerations.push_back(t);
        }
      }
      if (key == "etcd") {
        for (const auto& [ek, ev] : Fields(v, "kubernetes.etcd", {"url", "image"})) {
          if (ek == "url") s.etcd_url = Url(ev, ek, "etcd");
          if (ek == "image") s.etcd_image = String(ev, ek);
        }
      }
      if (key == "nats") {
        for (const auto& [nk, nv] : Fields(v, "kubernetes.nats", {"url", "image", "enabled"})) {
          if (nk == "url") s.nats_url = Url(nv, nk, "nats");
          if (nk == "image") s.nats_image = String(nv, nk);
          if (nk == "enabled") s.nats_enabled = Bool(nv, nk);
        }
      }
      if (key == "max_unavailable") s.max_unavailable = Int(v, key, 0, 1024);
      if (key == "prometheus") s.prometheus = Bool(v, key);
    }
  }

};

}  // namespace

bool IsQuantity(const std::string& s) {
  static const std::regex re("[0-9]+(\\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?");
  return std::regex_match(s, re);
}

bool IsDnsLabel(const std::string& s) {
  static const std::regex re("[a-z0-9]([-a-z0-9]*[a-z0-9])?");
  return s.size() <= 63 && std::regex_match(s, re);
}

Result<K8sSettings> ParseK8sSettings(const std::string& yaml_text, const std::string& source) {
  K8sSettings s;
  try {
    YAML::Node root = YAML::Load(yaml_text);
    if (!root.IsMap()) return s;  // ParseGraph reports the graph's own shape errors
    if (YAML::Node m = root["model"]; m && m.IsScalar()) s.graph_model_raw = m.as<std::string>();
    // Top-level servers the pods can reach (not loopback) count as external ones.
    auto external = [](const YAML::Node& n, const std::string& scheme) -> std::string {
      if (!n || !n.IsScalar()) return "";
      const std::string url = n.as<std::string>();
      if (url.rfind(scheme + "://", 0) != 0) return "";
      const std::string host = url.substr(scheme.size() + 3, url.find(':', scheme.size() + 3) -
                                                                 scheme.size() - 3);
      if (host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1" || host == "[::1]") return "";
      return url;
    };
    s.etcd_url = external(root["discovery"], "etcd");
    s.nats_url = external(root["event_plane"], "nats");
    if (YAML::Node k = root["kubernetes"]; k && !k.IsNull()) Reader(source).Read(k, s);
  } catch (const runtime::YamlFieldError& e) {
    return e.status;
  } catch (const YAML::Exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}: bad YAML: {}", source, e.msg);
  }
  return s;
}

}  // namespace tandem::k8s
