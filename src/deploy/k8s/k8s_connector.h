// The SLA planner's Kubernetes connector (issue 27): the prefill and decode workers are the
// Deployments `tandem k8s render` made (<name>-prefill, <name>-decode); the planner reads and sets
// their `scale` subresource through the API server, as `kubectl scale` does:
//   GET  /apis/apps/v1/namespaces/NS/deployments/NAME/scale        -> autoscaling/v1 Scale
//   PUT  the same path, that Scale with spec.replicas changed       (metadata.resourceVersion kept:
//        an edit made since the GET is a 409 Conflict, not overwritten; the planner reads the new
//        count next interval and takes it as a bound, planner/planner_loop.h)
// In a pod: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the ServiceAccount token
// (Authorization: Bearer, re-read for every request: kubelet rotates it) and CA bundle under
// /var/run/secrets/kubernetes.io/serviceaccount/, TLS verified against that CA. The RBAC it needs
// (get and update on deployments/scale) is rendered by `tandem k8s render` for a graph with a
// planner section (deploy/k8s/render_planner.cc).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "planner/planner_loop.h"

namespace tandem::k8s {

struct K8sConnectorOptions {
  std::string api_host;  // empty: $KUBERNETES_SERVICE_HOST
  int api_port = 0;      // 0: $KUBERNETES_SERVICE_PORT (else 443)
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_name;  // empty: the pod's (serviceaccount/namespace)
  std::string prefill_deployment, decode_deployment;
  int timeout_ms = 10000;
};

// The scale subresource's path.
std::string ScalePath(const std::string& namespace_name, const std::string& deployment);
// spec.replicas of an autoscaling/v1 Scale (InvalidArgument when missing or not an integer >= 0).
Result<int> ScaleReplicas(const nlohmann::json& scale);
// The PUT body: `scale` as read, spec.replicas set, status dropped (the API server ignores it).
nlohmann::json ScaleUpdate(const nlohmann::json& scale, int replicas);

class K8sConnector : public planner::ScaleConnector {
 public:
  // InvalidArgument for missing deployment names or no API server to talk to.
  static Result<std::unique_ptr<K8sConnector>> Create(K8sConnectorOptions options);
  std::string name() const override { return "kubernetes"; }
  Result<planner::RoleCounts> Current() override;
  Status Apply(const planner::RoleCounts& want) override;

 private:
  explicit K8sConnector(K8sConnectorOptions o) : o_(std::move(o)) {}
  // One HTTPS request; the answer's status and body.
  Result<std::pair<int, std::string>> Call(const std::string& method, const std::string& target,
                                           const std::string& body);
  Result<nlohmann::json> GetScale(const std::string& deployment);
  Status SetScale(const std::string& deployment, int replicas);
  K8sConnectorOptions o_;
};

}  // namespace tandem::k8s
