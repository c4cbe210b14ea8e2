// The Kubernetes-only settings of a deployment graph: its optional `kubernetes:` section, read by
// `tandem k8s render` (deploy/k8s/render.h) and ignored by `tandem serve`. Every key is optional:
//
//   kubernetes:
//     name: my-llm                  # prefix of every object name (default: the graph's name); a
//                                   # DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 40 chars
//     namespace: llm                # metadata.namespace (--namespace wins; none: not written,
//                                   # kubectl's current namespace applies)
//     image: repo/tandem:0.1        # every tandem container (--image wins; default tandem:latest)
//     image_pull_policy: IfNotPresent   # Always | IfNotPresent | Never
//     image_pull_secrets: [regcred]
//     service_account: tandem
//     model: /models/Qwen3-8B       # the model directory INSIDE the containers; default: the graph's
//                                   # `model` when it was written as an absolute path, else
//                                   # <model_cache.mount_path>/<its folder name> with a model
//                                   # cache, else none (the image's bundled model)
//     model_cache:                  # a PersistentVolumeClaim mounted in the frontend and workers;
//       claim: model-cache          #   its name (required in this section)
//       mount_path: /models         #   (default /models); HF_HOME is set to it
//       size: 200Gi                 #   given: the claim is rendered too (ReadWriteMany), else it
//       storage_class: efs-sc       #   must exist already
//     hf_token_secret: hf-token-secret  # Secret whose keys (HF_TOKEN) become env (envFrom,
//                                   # optional: pods start without it); "" leaves it out
//     shm_size: 16Gi                # workers' memory-backed /dev/shm emptyDir
//     grpc_port: 9000               # workers' gRPC port (the graph's worker ports are for serve)
//     metrics_port: 9090            # workers' /metrics and /health (probes, Prometheus)
//     frontend: {replicas: 1, service_type: ClusterIP, cpu: "1", memory: 2Gi}
//     workers: {cpu: "2", memory: 8Gi, gpus: 1}  # requests of each worker pod; gpus: its
//                                   # nvidia.com/gpu limit when the group's device is cuda
//     efa: 0                        # N > 0: vpc.amazonaws.com/efa: N per worker pod and
//                                   # FI_PROVIDER=efa; cpu workers use --kv-transfer-backend
//                                   # libfabric (it moves host memory only: cuda workers keep the
//                                   # agent's choice, tcp with host staging between nodes)
//     anti_affinity: preferred      # prefill vs decode pods on different nodes: preferred |
//                                   # required | none
//     same_zone: false              # true: prefill and decode pods in one zone (required affinity)
//     node_selector: {k: v}         # worker pods
//     tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]  # worker pods;
//                                   # default: that one for cuda groups, none for cpu groups
//     etcd: {url: etcd://etcd.infra:2379, image: quay.io/coreos/etcd:v3.5.17}
//                                   # url: an external etcd (no StatefulSet rendered); without
//                                   # it a 1-replica StatefulSet + Service <name>-etcd
//     nats: {url: nats://nats.infra:4222, image: nats:2.10-alpine, enabled: true}
//                                   # likewise; enabled: false: the embedded event plane
//     max_unavailable: 1            # each Deployment's PodDisruptionBudget
//     prometheus: true              # prometheus.io/scrape annotations on the pods
//
// A non-loopback etcd:// `discovery` (nats:// `event_plane`) at the graph's top level counts as an
// external url too; loopback ones (the local serve setup) are replaced by the in-cluster servers.
// Errors: InvalidArgument "<source>:<line>: <what>" for unknown keys, wrong types and bad values.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::k8s {

struct ModelCache {
  std::string claim;               // empty: no model cache
  std::string mount_path = "/models";
  std::string size;                // set: render the PersistentVolumeClaim
  std::string storage_class;
};

struct Toleration {
  std::string key, op = "Exists", value, effect;
};

struct K8sSettings {
  std::string name;                // empty: the graph's name
  std::string namespace_name;      // empty: no metadata.namespace
  std::string image = "tandem:latest";
  std::string image_pull_policy = "IfNotPresent";
  std::vector<std::string> image_pull_secrets;
  std::string service_account;
  std::string model;               // container path; empty: see the header
  std::string graph_model_raw;     // the graph's `model` as written (empty: none)
  ModelCache model_cache;
  std::string hf_token_secret = "hf-token-secret";
  std::string shm_size = "16Gi";
  int grpc_port = 9000;
  int metrics_port = 9090;
  int frontend_replicas = 1;
  std::string frontend_service_type = "ClusterIP";
  std::string frontend_cpu = "1", frontend_memory = "2Gi";
  std::string worker_cpu = "2", worker_memory = "8Gi";
  int worker_gpus = 1;
  int efa = 0;
  std::string anti_affinity = "preferred";
  bool same_zone = false;
  std::map<std::string, std::string> node_selector;
  bool has_tolerations = false;    // false: the default for cuda groups
  std::vector<Toleration> tolerations;
  std::string etcd_url;            // external; empty: in-cluster StatefulSet
  std::string etcd_image = "quay.io/coreos/etcd:v3.5.17";
  std::string nats_url;            // external; empty: in-cluster StatefulSet (when enabled)
  std::string nats_image = "nats:2.10-alpine";
  bool nats_enabled = true;
  int max_unavailable = 1;
  bool prometheus = true;
};

// Reads the `kubernetes:` section (and the raw `model`) of a graph's YAML text; `source` names the
// text in errors. A graph without the section gives the defaults.
Result<K8sSettings> ParseK8sSettings(const std::string& yaml_text, const std::string& source);

// Kubernetes resource quantity ("16Gi", "500m", "2"): the subset of the API's grammar tandem writes.
bool IsQuantity(const std::string& s);
// DNS-1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, <= 63 chars.
bool IsDnsLabel(const std::string& s);

}  // namespace tandem::k8s
