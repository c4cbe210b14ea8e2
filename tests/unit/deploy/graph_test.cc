// Deployment graphs (deploy/graph.h): parsing, defaults, relative model paths, the commands a
// graph expands into, the deploy/*.yaml files, and errors that name the line.
#include <filesystem>

#include <gtest/gtest.h>

#include "deploy/graph.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;

Result<Graph> Parse(const std::string& text) { return ParseGraph(text, "/graphs", "g.yaml"); }

// The error message of parsing `text` ("" when it parsed).
std::string ErrorOf(const std::string& text) {
  auto g = Parse(text);
  EXPECT_FALSE(g.ok()) << text;
  if (!g.ok()) {
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  }
  return g.ok() ? "" : g.status().message();
}

bool Has(const std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag && args[i + 1] == value) return true;
  }
  return false;
}

constexpr char kFull[] = R"(
name: pd
namespace: lab
model: ../models/m
served_model_name: m1
env: {TANDEM_LOG_LEVEL: debug}
frontend:
  host: 0.0.0.0
  port: 9000
  request_timeout_s: 30
  args: [--http-threads, 4]
workers:
  - mode: prefill
    replicas: 2
    devices: [cuda:0, cuda:1]
    port: 7000
    engine: {block_size: 32, kv_cache_gib: 0.5}
  - mode: decode
    max_local_prefill_tokens: 64
    metrics_port: 9100
    args: [--max-num-seqs, "8"]
    env: {TANDEM_LOG_LEVEL: info}
restart: {max_restarts: 3, backoff_ms: 10, max_backoff_ms: 40, reset_after_s: 5}
startup_timeout_s: 120
shutdown_grace_s: 3
)";

TEST(GraphTest, ParsesEveryKey) {
  auto g = Parse(kFull);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->name, "pd");
  EXPECT_EQ(g->namespace_name, "lab");
  EXPECT_EQ(g->model_dir, "/models/m");  // relative to the graph's folder (/graphs)
  EXPECT_EQ(g->served_model_name, "m1");
  EXPECT_EQ(g->frontend.host, "0.0.0.0");
  EXPECT_EQ(g->frontend.port, 9000);
  EXPECT_EQ(g->frontend.request_timeout_s, 30);
  ASSERT_EQ(g->workers.size(), 2u);
  EXPECT_EQ(g->workers[0].mode, "prefill");
  EXPECT_EQ(g->workers[0].replicas, 2);
  EXPECT_EQ(g->workers[0].DeviceOf(1), "cuda:1");
  EXPECT_EQ(g->workers[0].line, 13);
  EXPECT_EQ(g->workers[1].replicas, 1);
  EXPECT_EQ(g->workers[1].DeviceOf(0), "cpu");
  EXPECT_EQ(g->workers[1].max_local_prefill_tokens, 64);
  EXPECT_EQ(g->restart.max_restarts, 3);
  EXPECT_EQ(g->restart.max_backoff_ms, 40);
  EXPECT_EQ(g->startup_timeout_s, 120);
  EXPECT_EQ(g->shutdown_grace_s, 3);
  EXPECT_EQ(g->NumReplicas("prefill"), 2);
  EXPECT_EQ(g->NumReplicas("decode"), 1);
}

TEST(GraphTest, ExpandsIntoWorkerAndFrontendCommands) {
  auto g = Parse(kFull);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto cs = ExpandGraph(*g);
  ASSERT_EQ(cs.size(), 4u);
  EXPECT_EQ(cs[0].name, "prefill-0");
  EXPECT_EQ(cs[1].name, "prefill-1");
  EXPECT_EQ(cs[2].name, "decode-0");
  EXPECT_EQ(cs[3].name, "frontend");

  const auto& p1 = cs[1].args;
  EXPECT_EQ(p1[0], "worker");
  EXPECT_TRUE(Has(p1, "--mode", "prefill"));
  EXPECT_TRUE(Has(p1, "--namespace", "lab"));
  EXPECT_TRUE(Has(p1, "--port", "7001"));  // port + replica
  EXPECT_TRUE(Has(p1, "--device", "cuda:1"));
  EXPECT_TRUE(Has(p1, "--instance-id", "pd-prefill-1"));
  EXPECT_EQ(cs[1].instance_id, "pd-prefill-1");
  EXPECT_TRUE(Has(p1, "--model", "/models/m"));
  EXPECT_TRUE(Has(p1, "--served-model-name", "m1"));
  EXPECT_TRUE(Has(p1, "--block-size", "32"));
  EXPECT_TRUE(Has(p1, "--kv-cache-gib", "0.5"));
  EXPECT_EQ(cs[1].env.at("TANDEM_LOG_LEVEL"), "debug");

  const auto& d = cs[2].args;
  EXPECT_TRUE(Has(d, "--port", "0"));
  EXPECT_TRUE(Has(d, "--max-local-prefill-tokens", "64"));
  EXPECT_TRUE(Has(d, "--metrics-port", "9100"));
  EXPECT_TRUE(Has(d, "--max-num-seqs", "8"));
  EXPECT_EQ(cs[2].env.at("TANDEM_LOG_LEVEL"), "info");  // the group's env wins

  const auto& f = cs[3];
  EXPECT_EQ(f.args[0], "frontend");
  EXPECT_TRUE(Has(f.args, "--host", "0.0.0.0"));
  EXPECT_TRUE(Has(f.args, "--port", "9000"));
  EXPECT_TRUE(Has(f.args, "--namespace", "lab"));
  EXPECT_TRUE(Has(f.args, "--request-timeout-s", "30"));
  EXPECT_TRUE(Has(f.args, "--http-threads", "4"));
  EXPECT_EQ(f.host, "127.0.0.1");  // health is asked on loopback
  EXPECT_EQ(f.port, 9000);
}

TEST(GraphTest, DefaultsForAMinimalGraph) {
  auto g = ParseGraph("frontend: {port: 8000}\nworkers: [{mode: agg}]\n", "/x", "/x/my-graph.yaml");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->name, "my-graph");  // the file's stem
  EXPECT_EQ(g->namespace_name, "tandem");
  EXPECT_TRUE(g->model_dir.empty());  // the bundled model
  EXPECT_EQ(g->frontend.host, "127.0.0.1");
  EXPECT_EQ(g->restart.max_restarts, 5);
  const auto cs = ExpandGraph(*g);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_TRUE(Has(cs[0].args, "--device", "cpu"));
  for (const auto& a : cs[0].args) EXPECT_NE(a, "--model");
  for (const auto& a : cs[1].args) EXPECT_NE(a, "--request-timeout-s");
}

TEST(GraphTest, MigrationLimitGoesToTheFrontend) {
  auto g = ParseGraph("frontend: {port: 8000, migration_limit: 2}\nworkers: [{mode: agg}]\n", "/x",
                      "/x/g.yaml");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->frontend.migration_limit, 2);
  const auto cs = ExpandGraph(*g);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_TRUE(Has(cs[1].args, "--migration-limit", "2"));
  for (const auto& a : cs[0].args) EXPECT_NE(a, "--migration-limit");
  auto none = ParseGraph("frontend: {port: 8000}\nworkers: [{mode: agg}]\n", "/x", "/x/g.yaml");
  ASSERT_TRUE(none.ok());
  const auto none_cs = ExpandGraph(*none);  // (a range-for over ExpandGraph(...)[1] would dangle)
  for (const auto& a : none_cs[1].args) EXPECT_NE(a, "--migration-limit");
  EXPECT_FALSE(
      ParseGraph("frontend: {port: 8000, migration_limit: -1}\nworkers: [{mode: agg}]\n", "/x",
                 "/x/g.yaml").ok());
}

TEST(GraphTest, AbsoluteModelPathStaysAsItIs) {
  auto g = Parse("model: /opt/models/qwen\nfrontend: {port: 1}\nworkers: [{mode: agg}]\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->model_dir, "/opt/models/qwen");
}

TEST(GraphTest, ReplicasNumberedAcrossGroupsOfOneMode) {
  auto g = Parse("frontend: {port: 1}\nworkers:\n  - {mode: decode, replicas: 2}\n"
                 "  - {mode: decode, device: cuda:3}\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto cs = ExpandGraph(*g);
  ASSERT_EQ(cs.size(), 4u);
  EXPECT_EQ(cs[2].name, "decode-2");
  EXPECT_TRUE(Has(cs[2].args, "--device", "cuda:3"));
}

TEST(GraphTest, ErrorsNameTheLine) {
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - mode: agg\n    replica: 2\n"),
            "g.yaml:4: unknown key 'replica' in workers[0] (known: args, device, devices, engine, "
            "env, host, max_local_prefill_tokens, metrics_port, mode, port, replicas)");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - mode: mixed\n"),
            "g.yaml:3: bad mode 'mixed' (agg, prefill or decode)");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - mode: agg\n    replicas: 0\n"),
            "g.yaml:4: 'replicas' must be in [1, 1024] (got 0)");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - mode: agg\n    replicas: two\n"),
            "g.yaml:4: 'replicas' must be an integer");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - {mode: prefill}\n"),
            "g.yaml: prefill workers need at least one decode worker (requests reach prefill "
            "only through decode)");
  EXPECT_EQ(ErrorOf("workers: [{mode: agg}]\n"),
            "g.yaml:1: 'frontend' is required (at least {port: N})");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\n"),
            "g.yaml:1: 'workers' is required (a list of worker groups)");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers: []\n"),
            "g.yaml:2: 'workers' must be a non-empty list");
  EXPECT_EQ(ErrorOf(""), "g.yaml: the graph is empty");
  EXPECT_EQ(ErrorOf("- a\n- b\n"), "g.yaml:1: the graph must be a mapping");
  EXPECT_EQ(ErrorOf("frontend: {port: 70000}\nworkers: [{mode: agg}]\n"),
            "g.yaml:1: 'port' must be in [0, 65535] (got 70000)");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nfrontend: {port: 2}\nworkers: [{mode: agg}]\n"),
            "g.yaml:2: duplicate key 'frontend' in the graph");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - {mode: agg, replicas: 2, "
                    "devices: [cuda:0]}\n"),
            "g.yaml:3: workers[0]: 1 devices for 2 replicas (give one per replica, or 'device' "
            "for all)");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - {mode: agg, device: cpu, devices: [cpu]}\n"),
            "g.yaml:3: workers[0]: give 'device' or 'devices', not both");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - {mode: prefill, max_local_prefill_tokens: 8}\n"
                    "  - {mode: decode}\n"),
            "g.yaml:3: 'max_local_prefill_tokens' applies to decode workers only");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers:\n  - {replicas: 1}\n"),
            "g.yaml:3: workers[0]: 'mode' is required (agg, prefill or decode)");
  EXPECT_EQ(ErrorOf("name: a b\nfrontend: {port: 1}\nworkers: [{mode: agg}]\n"),
            "g.yaml:1: 'name' must match [A-Za-z0-9._-]+");
  EXPECT_EQ(ErrorOf("frontend: {port: 8000}\nworkers: [{mode: agg, port: 8000}]\n"),
            "g.yaml:2: workers[0] (agg): port 8000 is used twice in the graph");
  EXPECT_EQ(ErrorOf("frontend: {port: 1}\nworkers: [{mode: agg, args: --x}]\n"),
            "g.yaml:2: 'args' must be a list");
  // Syntax errors come from yaml-cpp with line and column.
  const std::string syntax = ErrorOf("frontend: {port: 1\nworkers: [{mode: agg}]\n");
  EXPECT_EQ(syntax.rfind("g.yaml:", 0), 0u) << syntax;
  EXPECT_NE(syntax.find("bad YAML"), std::string::npos) << syntax;
}

TEST(GraphTest, ValidateCatchesCodeBuiltGraphs) {
  Graph g;
  g.source = "tandem run";
  EXPECT_FALSE(ValidateGraph(g).ok());  // no workers
  GraphWorkerGroup w;
  w.mode = "decode";
  g.workers.push_back(w);
  EXPECT_TRUE(ValidateGraph(g).ok()) << ValidateGraph(g).ToString();
  g.workers[0].replicas = 0;
  EXPECT_EQ(ValidateGraph(g).message(), "tandem run: workers[0] (decode): replicas must be at least 1");
}

TEST(GraphTest, MissingFileIsNotFound) {
  auto g = LoadGraphFile("/nonexistent/graph.yaml");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound);
}

TEST(GraphTest, TheDeployGraphsParse) {
  const fs::path deploy = fs::path(TANDEM_SOURCE_DIR) / "deploy";
  struct Want {
    const char* file;
    int agg, prefill, decode;
  };
  for (const Want& want : {Want{"agg.yaml", 1, 0, 0}, Want{"disagg-1p1d.yaml", 0, 1, 1},
                           Want{"disagg-2p2d.yaml", 0, 2, 2}, Want{"disagg-1p1d-gpu.yaml", 0, 1, 1},
                           Want{"disagg-1p1d-2gpu.yaml", 0, 1, 1}}) {
    SCOPED_TRACE(want.file);
    auto g = LoadGraphFile((deploy / want.file).string());
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(g->NumReplicas("agg"), want.agg);
    EXPECT_EQ(g->NumReplicas("prefill"), want.prefill);
    EXPECT_EQ(g->NumReplicas("decode"), want.decode);
    EXPECT_EQ(g->frontend.port, 8000);
    EXPECT_EQ(g->frontend.host, "127.0.0.1");
  }
}

TEST(GraphTest, DiscoveryAndEventPlaneReachEveryComponent) {
  auto g = Parse("discovery: etcd://10.0.0.1:2379\nevent_plane: embedded\nfrontend: {port: 8000}\n"
                 "workers: [{mode: agg, replicas: 2}]\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->discovery, "etcd://10.0.0.1:2379");
  const auto specs = ExpandGraph(*g);
  ASSERT_EQ(specs.size(), 3u);
  for (const auto& c : specs) {
    EXPECT_TRUE(Has(c.args, "--discovery", "etcd://10.0.0.1:2379")) << c.name;
    EXPECT_TRUE(Has(c.args, "--event-plane", "embedded")) << c.name;
  }
  // Unset: no flag (the components' embedded defaults).
  auto plain = Parse("frontend: {port: 8000}\nworkers: [{mode: agg}]\n");
  ASSERT_TRUE(plain.ok());
  for (const auto& c : ExpandGraph(*plain)) {
    for (const auto& a : c.args) EXPECT_TRUE(a != "--discovery" && a != "--event-plane");
  }
  EXPECT_NE(ErrorOf("discovery: zookeeper://h\nfrontend: {port: 1}\nworkers: [{mode: agg}]\n")
                .find("g.yaml:1: --discovery zookeeper://h"),
            std::string::npos);
  EXPECT_NE(ErrorOf("event_plane: kafka://h\nfrontend: {port: 1}\nworkers: [{mode: agg}]\n")
                .find("g.yaml:1: --event-plane kafka://h"),
            std::string::npos);
}

}  // namespace
}  // namespace tandem::runtime
