// `tandem k8s render`: a deployment graph (deploy/graph.h) and its `kubernetes:` section
// (deploy/k8s/settings.h) as Kubernetes manifests, one multi-document YAML stream in a fixed order:
//
//   [PersistentVolumeClaim <name>-model-cache-claim]   model_cache with a size
//   Service + StatefulSet <name>-etcd                  unless an external etcd url is given
//   Service + StatefulSet <name>-nats                  unless external or nats.enabled: false
//   Deployment + Service + PodDisruptionBudget <name>-frontend   (Service port 8000, "http")
//   Deployment + PodDisruptionBudget per worker group: <name>-<mode> (<name>-<mode>-<k> when a
//     mode has several groups), replicas from the graph
//   ConfigMap (the profile) + ServiceAccount + Role + RoleBinding + Deployment <name>-planner
//                                                      a graph with a planner section: `tandem
//     planner` scaling <name>-prefill and <name>-decode through their scale subresource (get and
//     update on exactly those two); worker pods' terminationGracePeriodSeconds add its drain time
//
// The containers run what a pod really runs: command [tandem], args `frontend ...` or
// `worker --mode M ...` with --discovery etcd://<name>-etcd:2379 (Service names resolve in the
// namespace), --event-plane nats://<name>-nats:4222, workers on --host $(POD_IP) (the address they
// publish in etcd; POD_IP comes from the downward API) with --port <grpc_port>,
// --metrics-port <metrics_port> (/health and /metrics) and --kv-transfer-host $(POD_IP). Each pod
// gets its own GPU(s), so a cuda group's device becomes --device cuda:0. The graph's worker
// host/port/metrics_port and frontend host are for `tandem serve` and are not used here; the
// frontend listens on 0.0.0.0 and the graph's frontend port (8000 when 0).
//
// Probes: workers: startup, readiness and liveness httpGet /health on the metrics port. Frontend:
// readiness /health (503 until it has a worker), startup and liveness /metrics (200 whenever its
// HTTP server answers, so a frontend is not restarted while the workers are away). The startup
// probes allow the graph's startup_timeout_s; terminationGracePeriodSeconds is its
// shutdown_grace_s.
//
// Errors (InvalidArgument): names that are not DNS-1123 labels, a group mixing cpu and cuda
// devices, a model given as a relative path with no kubernetes.model / model_cache to say where it
// is inside the containers, --kv-transfer-backend in a group's args together with efa.
#pragma once

#include <string>

#include "common/status.h"
#include "deploy/graph.h"
#include "deploy/k8s/settings.h"

namespace tandem::k8s {

struct RenderOptions {
  std::string namespace_name;  // non-empty: overrides kubernetes.namespace
  std::string image;           // non-empty: overrides kubernetes.image
  std::string source_name;     // written in the header comment (e.g. the graph's file name)
};

// The manifests as one YAML stream ("---" between documents), deterministic for its inputs.
Result<std::string> RenderManifests(const runtime::Graph& graph, const K8sSettings& settings,
                                    const RenderOptions& options);

// Loads the graph file (runtime::LoadGraphFile) and its kubernetes section, then renders.
Result<std::string> RenderGraphFile(const std::string& path, RenderOptions options);

}  // namespace tandem::k8s
