// The KV router's graph keys (deploy/graph.h frontend.router_mode / router_temperature /
// kv_overlap_score_weight): passed to the frontend as Dynamo's flags; bad values name the line.
#include <gtest/gtest.h>

#include "deploy/graph.h"

namespace tandem::runtime {
namespace {

bool HasFlag(const std::vector<std::string>& args, const std::string& flag,
             const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == flag && args[i + 1] == value) return true;
  }
  return false;
}

const ComponentSpec* Frontend(const std::vector<ComponentSpec>& cs) {
  for (const ComponentSpec& c : cs) {
    if (c.mode == "frontend") return &c;
  }
  return nullptr;
}

TEST(GraphRouterKeys, AreTheFrontendsRouterFlags) {
  auto g = ParseGraph(R"(
frontend:
  port: 8000
  router_mode: round-robin
  router_temperature: 0.5
  kv_overlap_score_weight: 2
workers:
  - mode: agg
)", "/graphs", "g.yaml");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto cs = ExpandGraph(*g);
  const ComponentSpec* f = Frontend(cs);
  ASSERT_NE(f, nullptr);
  EXPECT_TRUE(HasFlag(f->args, "--router-mode", "round-robin"));
  EXPECT_TRUE(HasFlag(f->args, "--router-temperature", "0.5"));
  EXPECT_TRUE(HasFlag(f->args, "--kv-overlap-score-weight", "2"));
}

TEST(GraphRouterKeys, OmittedKeysPassNoFlagAndBadOnesNameTheLine) {
  auto g = ParseGraph("frontend: {port: 8000}\nworkers: [{mode: agg}]\n", "/graphs", "g.yaml");
  ASSERT_TRUE(g.ok());
  const auto cs = ExpandGraph(*g);
  const ComponentSpec* f = Frontend(cs);
  ASSERT_NE(f, nullptr);
  for (const std::string& a : f->args) EXPECT_EQ(a.find("--router"), std::string::npos) << a;
  auto bad = ParseGraph("frontend:\n  port: 8000\n  router_mode: nearest\nworkers: [{mode: agg}]\n",
                        "/graphs", "g.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("g.yaml:3"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("router_mode"), std::string::npos);
  auto negative = ParseGraph(
      "frontend:\n  port: 8000\n  router_temperature: -1\nworkers: [{mode: agg}]\n", "/graphs",
      "g.yaml");
  EXPECT_FALSE(negative.ok());
}

}  // namespace
}  // namespace tandem::runtime
