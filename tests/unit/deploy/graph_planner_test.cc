// The `planner:` section of a deployment graph (deploy/graph_planner.h): every key, the rules
// (one prefill and one decode group, no agg, replicas within bounds, devices for the maximum, ports
// up to the maximum), the profile path resolved against the graph's folder, the worker flag it
// adds, and ExpandWorker for a replica past the graph's own count.
#include <gtest/gtest.h>

#include "deploy/graph.h"

namespace tandem::runtime {
namespace {

Result<Graph> Parse(const std::string& text) { return ParseGraph(text, "/graphs", "g.yaml"); }

std::string ErrorOf(const std::string& text) {
  auto g = Parse(text);
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? "" : g.status().message();
}

const std::string kWorkers =
    "frontend: {port: 9000}\nworkers:\n  - {mode: prefill, replicas: 1, port: 7000}\n"
    "  - {mode: decode, replicas: 2}\n";

TEST(GraphPlannerTest, ParsesEveryKeyAndResolvesTheProfile) {
  auto g = Parse(kWorkers +
                 "planner:\n  profile: p/profile.json\n  ttft_ms: 800\n  itl_ms: 40\n  interval_s: 10\n"
                 "  prefill: {min: 1, max: 3}\n  decode: {min: 2, max: 4}\n  budget: 6\n  predictor: ewma\n"
                 "  scale_down_intervals: 3\n  cooldown_s: 20\n  drain_timeout_s: 15\n  metrics_port: 9400\n"
                 "  correction: false\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const GraphPlanner& p = g->planner;
  EXPECT_TRUE(p.enabled);
  EXPECT_EQ(p.profile, "/graphs/p/profile.json");
  EXPECT_EQ(p.ttft_ms, 800);
  EXPECT_EQ(p.itl_ms, 40);
  EXPECT_EQ(p.interval_s, 10);
  EXPECT_EQ(p.min_prefill, 1);
  EXPECT_EQ(p.max_prefill, 3);
  EXPECT_EQ(p.min_decode, 2);
  EXPECT_EQ(p.max_decode, 4);
  EXPECT_EQ(p.budget, 6);
  EXPECT_EQ(p.predictor, "ewma");
  EXPECT_EQ(p.scale_down_intervals, 3);
  EXPECT_EQ(p.cooldown_s, 20);
  EXPECT_EQ(p.drain_timeout_s, 15);
  EXPECT_EQ(p.metrics_port, 9400);
  EXPECT_FALSE(p.correction);
  EXPECT_TRUE(Parse(kWorkers + "planner: {profile: x.json}\n")->planner.correction);  // on by default
  EXPECT_FALSE(Parse(kWorkers)->planner.enabled);
}

TEST(GraphPlannerTest, WorkersGetTheDrainTimeoutAndGrowPastTheGraphsCount) {
  auto g = Parse(kWorkers + "planner: {profile: x.json, prefill: {min: 1, max: 3}, drain_timeout_s: 12.5}\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const ComponentSpec first = ExpandGraph(*g)[0];
  const ComponentSpec third = ExpandWorker(*g, 0, 2);  // prefill replica 2: not in the graph yet
  EXPECT_EQ(third.name, "prefill-2");
  EXPECT_EQ(third.instance_id, "g-prefill-2");
  auto flag = [](const std::vector<std::string>& args, const std::string& name) {
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == name) return args[i + 1];
    }
    return std::string();
  };
  EXPECT_EQ(flag(first.args, "--drain-timeout-s"), "12.5");
  EXPECT_EQ(flag(third.args, "--port"), "7002");
  EXPECT_EQ(flag(ExpandWorker(*g, 1, 3).args, "--instance-id"), "g-decode-3");
}

TEST(GraphPlannerTest, RulesAreErrorsNamingWhatIsWrong) {
  EXPECT_NE(ErrorOf(kWorkers + "planner: {ttft_ms: 100}\n").find("'profile' is required"), std::string::npos);
  EXPECT_NE(ErrorOf("frontend: {port: 1}\nworkers:\n  - {mode: agg}\nplanner: {profile: p.json}\n")
                .find("no agg workers"), std::string::npos);
  EXPECT_NE(ErrorOf("frontend: {port: 1}\nworkers:\n  - {mode: prefill}\n  - {mode: decode}\n"
                    "  - {mode: decode}\nplanner: {profile: p.json}\n").find("exactly one prefill and one decode"),
            std::string::npos);
  EXPECT_NE(ErrorOf(kWorkers + "planner: {profile: p.json, decode: {min: 1, max: 1}}\n")
                .find("decode replicas 2 outside the planner's bounds [1, 1]"), std::string::npos);
  EXPECT_NE(ErrorOf(kWorkers + "planner: {profile: p.json, prefill: {min: 3, max: 2}}\n").find("'min' is above 'max'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(kWorkers + "planner: {profile: p.json, prefill: {min: 1}}\n").find("needs both"),
            std::string::npos);
  EXPECT_NE(ErrorOf(kWorkers + "planner: {profile: p.json, ttft_ms: 0}\n").find("must be positive"),
            std::string::npos);
  EXPECT_NE(ErrorOf(kWorkers + "planner: {profile: p.json, predictor: arima}\n").find("arima"), std::string::npos);
  EXPECT_NE(ErrorOf(kWorkers + "planner: {profile: p.json, budget: 1}\n").find("below the minima"),
            std::string::npos);
  EXPECT_NE(ErrorOf(kWorkers + "planner: {profile: p.json, colour: red}\n").find("colour"), std::string::npos);
  // One device per replica: as many as the planner's maximum.
  EXPECT_NE(ErrorOf("frontend: {port: 1}\nworkers:\n  - {mode: prefill, devices: [cuda:0, cuda:1]}\n"
                    "  - {mode: decode}\nplanner: {profile: p.json, prefill: {min: 1, max: 3}}\n")
                .find("the planner's maximum"),
            std::string::npos);
  EXPECT_TRUE(Parse("frontend: {port: 1}\nworkers:\n  - {mode: prefill, devices: [cuda:0, cuda:1]}\n"
                    "  - {mode: decode}\nplanner: {profile: p.json, prefill: {min: 1, max: 2}}\n").ok());
  // Fixed ports are claimed up to the maximum: prefill 7000-7003 meets decode's 7003.
  EXPECT_NE(ErrorOf("frontend: {port: 1}\nworkers:\n  - {mode: prefill, port: 7000}\n"
                    "  - {mode: decode, port: 7003}\nplanner: {profile: p.json, prefill: {min: 1, max: 4}}\n")
                .find("port 7003 is used twice"), std::string::npos);
}

}  // namespace
}  // namespace tandem::runtime
