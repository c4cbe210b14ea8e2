// tandem k8s render (deploy/k8s/render.h, deploy/k8s/settings.h): the options of the kubernetes:
// section, the errors for graphs that cannot become manifests, and the output read back as YAML.
#include "deploy/k8s/render.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace tandem::k8s {
namespace {

const char* kDisagg =
    "name: demo\nfrontend: {port: 8000}\n"
    "workers:\n"
    "  - {mode: prefill, replicas: 2, device: cpu}\n"
    "  - {mode: decode, replicas: 3, device: cpu, max_local_prefill_tokens: 64,"
    " engine: {block_size: 16}, args: [--stats-interval-s, '1'], env: {A: b}}\n";

Result<std::string> Render(const std::string& yaml, RenderOptions options = {}) {
  auto graph = runtime::ParseGraph(yaml, "/tmp", "graph.yaml");
  if (!graph.ok()) return graph.status();
  auto settings = ParseK8sSettings(yaml, "graph.yaml");
  if (!settings.ok()) return settings.status();
  return RenderManifests(*graph, *settings, options);
}

std::vector<YAML::Node> Docs(const std::string& text) {
  std::vector<YAML::Node> out;
  for (const auto& d : YAML::LoadAll(text)) {
    if (d.IsMap()) out.push_back(d);
  }
  return out;
}

YAML::Node Find(const std::vector<YAML::Node>& docs, const std::string& kind,
                const std::string& name) {
  for (const auto& d : docs) {
    if (d["kind"].as<std::string>() == kind && d["metadata"]["name"].as<std::string>() == name) {
      return d;
    }
  }
  ADD_FAILURE() << "no " << kind << " " << name;
  return YAML::Node();
}

std::vector<std::string> Args(const YAML::Node& deployment) {
  return deployment["spec"]["template"]["spec"]["containers"][0]["args"]
      .as<std::vector<std::string>>();
}

bool Has(const std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag && args[i + 1] == value) return true;
  }
  return false;
}

TEST(K8sRenderTest, DefaultsGiveTheWholeDeployment) {
  auto out = Render(kDisagg, {"ns1", "repo/tandem:1", "demo.yaml"});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto docs = Docs(*out);
  std::vector<std::string> kinds;
  for (const auto& d : docs) kinds.push_back(d["kind"].as<std::string>() + "/" + d["metadata"]["name"].as<std::string>());
  EXPECT_EQ(kinds, (std::vector<std::string>{
                       "Service/demo-etcd", "StatefulSet/demo-etcd", "Service/demo-nats",
                       "StatefulSet/demo-nats", "Deployment/demo-frontend", "Service/demo-frontend",
                       "PodDisruptionBudget/demo-frontend", "Deployment/demo-prefill",
                       "PodDisruptionBudget/demo-prefill", "Deployment/demo-decode",
                       "PodDisruptionBudget/demo-decode"}));
  for (const auto& d : docs) EXPECT_EQ(d["metadata"]["namespace"].as<std::string>(), "ns1");

  const YAML::Node decode = Find(docs, "Deployment", "demo-decode");
  EXPECT_EQ(decode["spec"]["replicas"].as<int>(), 3);
  EXPECT_EQ(Find(docs, "Deployment", "demo-prefill")["spec"]["replicas"].as<int>(), 2);
  const YAML::Node c = decode["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(c["image"].as<std::string>(), "repo/tandem:1");
  EXPECT_EQ(c["command"][0].as<std::string>(), "tandem");
  const auto args = Args(decode);
  EXPECT_EQ(args[0], "worker");
  EXPECT_TRUE(Has(args, "--mode", "decode"));
  EXPECT_TRUE(Has(args, "--host", "$(POD_IP)"));
  EXPECT_TRUE(Has(args, "--kv-transfer-host", "$(POD_IP)"));
  EXPECT_TRUE(Has(args, "--port", "9000"));
  EXPECT_TRUE(Has(args, "--metrics-port", "9090"));
  EXPECT_TRUE(Has(args, "--discovery", "etcd://demo-etcd:2379"));
  EXPECT_TRUE(Has(args, "--event-plane", "nats://demo-nats:4222"));
  EXPECT_TRUE(Has(args, "--max-local-prefill-tokens", "64"));
  EXPECT_TRUE(Has(args, "--block-size", "16"));
  EXPECT_TRUE(Has(args, "--stats-interval-s", "1"));
  EXPECT_TRUE(std::find(args.begin(), args.end(), "--instance-id") == args.end());
  EXPECT_EQ(c["env"][0]["name"].as<std::string>(), "POD_IP");
  EXPECT_EQ(c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>(), "status.podIP");
  EXPECT_EQ(c["env"][1]["name"].as<std::string>(), "A");
  EXPECT_EQ(c["envFrom"][0]["secretRef"]["name"].as<std::string>(), "hf-token-secret");
  EXPECT_EQ(c["livenessProbe"]["httpGet"]["path"].as<std::string>(), "/health");
  EXPECT_EQ(c["startupProbe"]["failureThreshold"].as<int>(), 60);  // 600 s / 10 s
  EXPECT_FALSE(c["resources"]["limits"]);                         // cpu: no GPU
  const YAML::Node pod = decode["spec"]["template"]["spec"];
  EXPECT_EQ(pod["volumes"][0]["emptyDir"]["medium"].as<std::string>(), "Memory");
  EXPECT_EQ(pod["volumes"][0]["emptyDir"]["sizeLimit"].as<std::string>(), "16Gi");
  EXPECT_EQ(pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
               ["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"]
                   .as<std::string>(),
            "prefill");
  EXPECT_EQ(decode["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"].as<std::string>(),
            "9090");

  const YAML::Node frontend = Find(docs, "Deployment", "demo-frontend");
  const auto fargs = Args(frontend);
  EXPECT_EQ(fargs[0], "frontend");
  EXPECT_TRUE(Has(fargs, "--host", "0.0.0.0"));
  EXPECT_TRUE(Has(fargs, "--port", "8000"));
  EXPECT_EQ(frontend["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
                .as<std::string>(),
            "/health");
  EXPECT_EQ(Find(docs, "Service", "demo-frontend")["spec"]["ports"][0]["port"].as<int>(), 8000);
  EXPECT_EQ(Find(docs, "PodDisruptionBudget", "demo-decode")["spec"]["maxUnavailable"].as<int>(), 1);
}

TEST(K8sRenderTest, OutputIsDeterministic) {
  auto a = Render(kDisagg), b = Render(kDisagg);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(a->find("namespace:"), std::string::npos);  // none given: none written
}

TEST(K8sRenderTest, CudaGroupsGetOneGpuEachAndTheToleration) {
  auto out = Render(
      "name: g\nfrontend: {port: 8000}\nworkers:\n"
      "  - {mode: prefill, device: 'cuda:3'}\n  - {mode: decode, devices: ['cuda:1', 'cuda:2'], replicas: 2}\n"
      "kubernetes: {workers: {gpus: 2}}\n");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto docs = Docs(*out);
  for (const char* name : {"g-prefill", "g-decode"}) {
    const YAML::Node d = Find(docs, "Deployment", name);
    EXPECT_TRUE(Has(Args(d), "--device", "cuda:0")) << name;
    const YAML::Node pod = d["spec"]["template"]["spec"];
    EXPECT_EQ(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"].as<std::string>(), "2");
    EXPECT_EQ(pod["tolerations"][0]["key"].as<std::string>(), "nvidia.com/gpu");
  }
}

TEST(K8sRenderTest, EfaSameZoneModelCacheAndExternalServers) {
  auto out = Render(
      "name: eks\nmodel: /opt/models/Qwen3-8B\nserved_model_name: qwen\n"
      "discovery: etcd://etcd.infra:2379\nfrontend: {port: 8000}\nworkers:\n"
      "  - {mode: prefill, device: cuda}\n  - {mode: decode, device: cuda}\n"
      "kubernetes:\n  efa: 2\n  same_zone: true\n  anti_affinity: required\n"
      "  model_cache: {claim: cache, size: 100Gi, storage_class: efs-sc}\n"
      "  nats: {enabled: false}\n  hf_token_secret: ''\n  shm_size: 32Gi\n"
      "  node_selector: {pool: gpu}\n  tolerations: [{key: dedicated, operator: Equal, value: llm, effect: NoSchedule}]\n");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto docs = Docs(*out);
  EXPECT_EQ(docs[0]["kind"].as<std::string>(), "PersistentVolumeClaim");
  EXPECT_EQ(docs[0]["spec"]["storageClassName"].as<std::string>(), "efs-sc");
  EXPECT_EQ(out->find("StatefulSet"), std::string::npos);  // external etcd, no NATS
  const YAML::Node d = Find(docs, "Deployment", "eks-decode");
  const auto args = Args(d);
  // cuda workers keep the agent's backend choice (libfabric moves host memory only).
  EXPECT_TRUE(std::find(args.begin(), args.end(), "--kv-transfer-backend") == args.end());
  EXPECT_TRUE(Has(args, "--discovery", "etcd://etcd.infra:2379"));
  EXPECT_TRUE(Has(args, "--model", "/models/Qwen3-8B"));  // the graph's folder on the cache
  EXPECT_TRUE(Has(args, "--served-model-name", "qwen"));
  EXPECT_TRUE(std::find(args.begin(), args.end(), "--event-plane") == args.end());
  const YAML::Node pod = d["spec"]["template"]["spec"];
  const YAML::Node c = pod["containers"][0];
  EXPECT_EQ(c["resources"]["limits"]["vpc.amazonaws.com/efa"].as<std::string>(), "2");
  EXPECT_FALSE(c["envFrom"]);
  EXPECT_EQ(pod["volumes"][0]["emptyDir"]["sizeLimit"].as<std::string>(), "32Gi");
  EXPECT_EQ(pod["volumes"][1]["persistentVolumeClaim"]["claimName"].as<std::string>(), "cache");
  EXPECT_TRUE(pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]);
  EXPECT_EQ(pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
                ["topologyKey"].as<std::string>(),
            "topology.kubernetes.io/zone");
  EXPECT_EQ(pod["nodeSelector"]["pool"].as<std::string>(), "gpu");
  EXPECT_EQ(pod["tolerations"].size(), 1u);
  EXPECT_EQ(pod["tolerations"][0]["key"].as<std::string>(), "dedicated");
  bool fi = false;
  for (const auto& e : c["env"]) fi = fi || e["name"].as<std::string>() == "FI_PROVIDER";
  EXPECT_TRUE(fi);
}

TEST(K8sRenderTest, SeveralGroupsOfOneModeAreNumbered) {
  auto out = Render("name: m\nfrontend: {port: 8000}\nworkers:\n  - {mode: decode}\n  - {mode: decode}\n");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto docs = Docs(*out);
  Find(docs, "Deployment", "m-decode-0");
  Find(docs, "Deployment", "m-decode-1");
}

TEST(K8sRenderTest, CliOptionsOverrideTheSection) {
  auto out = Render("name: o\nfrontend: {port: 8000}\nworkers: [{mode: agg}]\n"
                    "kubernetes: {namespace: a, image: 'x:1'}\n",
                    {"b", "y:2", ""});
  ASSERT_TRUE(out.ok());
  EXPECT_NE(out->find("namespace: b"), std::string::npos);
  EXPECT_NE(out->find("image: y:2"), std::string::npos);
  EXPECT_EQ(out->find("x:1"), std::string::npos);
}

std::string ErrorOf(const std::string& yaml) {
  auto out = Render(yaml);
  EXPECT_FALSE(out.ok());
  return out.ok() ? "" : out.status().message();
}

TEST(K8sRenderTest, ClearErrors) {
  const std::string base = "frontend: {port: 8000}\nworkers: [{mode: agg}]\n";
  EXPECT_EQ(ErrorOf("name: Demo_1\n" + base),
            "graph.yaml: 'Demo_1' is not usable as a Kubernetes name prefix (a DNS-1123 label of at "
            "most 40 characters: lowercase letters, digits, '-'); set kubernetes.name");
  EXPECT_TRUE(Render("name: Demo_1\n" + base + "kubernetes: {name: demo}\n").ok());
  EXPECT_EQ(ErrorOf("name: a\n" + base + "kubernetes: {shm: 1Gi}\n").substr(0, 45),
            "graph.yaml:4: unknown key 'shm' in kubernetes");
  EXPECT_EQ(ErrorOf("name: a\n" + base + "kubernetes: {shm_size: lots}\n"),
            "graph.yaml:4: 'shm_size' must be a Kubernetes quantity like 16Gi, 500m or 2 (got 'lots')");
  EXPECT_EQ(ErrorOf("name: a\n" + base + "kubernetes: {anti_affinity: maybe}\n"),
            "graph.yaml:4: 'anti_affinity' must be one of none, preferred, required (got 'maybe')");
  EXPECT_EQ(ErrorOf("name: a\n" + base + "kubernetes: {etcd: {url: 'http://x:1'}}\n"),
            "graph.yaml:4: 'url' must look like etcd://host:port (got 'http://x:1')");
  EXPECT_EQ(ErrorOf("name: a\n" + base + "kubernetes: {model_cache: {size: 1Gi}}\n"),
            "graph.yaml:4: kubernetes.model_cache: 'claim' is required");
  EXPECT_EQ(ErrorOf("name: a\n" + base + "kubernetes: [1]\n"),
            "graph.yaml:4: 'kubernetes' must be a mapping");
  EXPECT_EQ(ErrorOf("name: a\nmodel: ../m\n" + base),
            "graph.yaml: the graph's model '../m' is a path on this machine: set kubernetes.model "
            "(its path inside the containers) or kubernetes.model_cache");
  EXPECT_EQ(ErrorOf("name: a\nfrontend: {port: 8000}\nworkers:\n  - {mode: agg, replicas: 2, "
                    "devices: [cpu, 'cuda:0']}\n"),
            "graph.yaml:4: workers (agg): a Deployment's pods are alike: its devices must be all cpu "
            "or all cuda");
  EXPECT_EQ(ErrorOf("name: a\nfrontend: {port: 8000}\nworkers:\n  - {mode: prefill, device: tpu}\n"
                    "  - {mode: decode}\n"),
            "graph.yaml:4: workers (prefill): device 'tpu' is neither cpu nor cuda[:N]");
  EXPECT_EQ(ErrorOf("name: a\nfrontend: {port: 8000}\nworkers:\n  - {mode: prefill, args: "
                    "[--kv-transfer-backend, tcp]}\n  - {mode: decode}\nkubernetes: {efa: 1}\n"),
            "graph.yaml:4: workers (prefill): --kv-transfer-backend in args conflicts with "
            "kubernetes.efa (which selects libfabric for cpu workers)");
  EXPECT_FALSE(Render("name: a\n" + base, {"Bad_NS", "", ""}).ok());
}

TEST(K8sRenderTest, EfaSelectsLibfabricForCpuWorkers) {
  auto out = Render("name: c\nfrontend: {port: 8000}\nworkers:\n  - {mode: prefill}\n"
                    "  - {mode: decode}\nkubernetes: {efa: 1}\n");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto docs = Docs(*out);
  for (const char* name : {"c-prefill", "c-decode"}) {
    const YAML::Node d = Find(docs, "Deployment", name);
    EXPECT_TRUE(Has(Args(d), "--kv-transfer-backend", "libfabric")) << name;
    const YAML::Node c = d["spec"]["template"]["spec"]["containers"][0];
    EXPECT_EQ(c["resources"]["limits"]["vpc.amazonaws.com/efa"].as<std::string>(), "1") << name;
  }
}

TEST(K8sRenderTest, ServeStillParsesGraphsWithTheSection) {
  auto g = runtime::ParseGraph("name: a\nfrontend: {port: 8000}\nworkers: [{mode: agg}]\n"
                               "kubernetes: {efa: 1}\n", "/tmp", "graph.yaml");
  EXPECT_TRUE(g.ok()) << g.status().ToString();
}

}  // namespace
}  // namespace tandem::k8s

namespace tandem::k8s {
namespace {

TEST(K8sRenderPlannerTest, APlannerGraphGetsThePlannerWithScaleRightsOnItsTwoDeploymentsOnly) {
  const std::string dir = "/tmp/tandem-render-planner-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/p.json") << R"({"prefill":[{"prompt_tokens":64,"ttft_ms":30}],)"
                                 << R"("decode":[{"context":256,"batch":1,"itl_ms":20}]})";
  const std::string yaml = "name: pl\nfrontend: {port: 8000}\nworkers:\n  - {mode: prefill}\n  - {mode: decode}\n"
                           "planner: {profile: " + dir + "/p.json, drain_timeout_s: 25}\nshutdown_grace_s: 5\n";
  auto out = Render(yaml, {"ns1", "img:1", ""});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto docs = Docs(*out);
  const YAML::Node role = Find(docs, "Role", "pl-planner");
  ASSERT_TRUE(role);
  ASSERT_EQ(role["rules"].size(), 1u);
  EXPECT_EQ(role["rules"][0]["resources"][0].as<std::string>(), "deployments/scale");
  EXPECT_EQ(role["rules"][0]["resourceNames"][0].as<std::string>(), "pl-prefill");
  EXPECT_EQ(role["rules"][0]["resourceNames"][1].as<std::string>(), "pl-decode");
  EXPECT_EQ(Find(docs, "RoleBinding", "pl-planner")["subjects"][0]["namespace"].as<std::string>(), "ns1");
  const YAML::Node planner = Find(docs, "Deployment", "pl-planner");
  ASSERT_TRUE(planner);
  EXPECT_EQ(planner["spec"]["template"]["spec"]["serviceAccountName"].as<std::string>(), "pl-planner");
  EXPECT_NE(Find(docs, "ConfigMap", "pl-planner")["data"]["profile.json"].as<std::string>().find("ttft_ms"),
            std::string::npos);
  // Workers may drain before the kubelet's SIGKILL: grace 5 + drain 25.
  EXPECT_EQ(Find(docs, "Deployment", "pl-decode")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as<int>(), 30);
  // The RoleBinding needs the namespace; the profile must exist at render time.
  auto no_ns = Render(yaml);
  ASSERT_FALSE(no_ns.ok());
  EXPECT_NE(no_ns.status().message().find("namespace"), std::string::npos);
  std::filesystem::remove_all(dir);
  auto no_profile = Render(yaml, {"ns1", "img:1", ""});
  ASSERT_FALSE(no_profile.ok());
  EXPECT_NE(no_profile.status().message().find("p.json"), std::string::npos);
}

}  // namespace
}  // namespace tandem::k8s
