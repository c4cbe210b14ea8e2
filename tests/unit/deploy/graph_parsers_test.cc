// The chat output parsers' graph keys (deploy/graph.h frontend.reasoning_parser /
// tool_call_parser): passed to the frontend as --reasoning-parser / --tool-call-parser; bad names
// name the line.
#include <gtest/gtest.h>

#include "deploy/graph.h"

namespace tandem::runtime {
namespace {

std::vector<std::string> FrontendArgs(const Graph& g) {
  for (const ComponentSpec& c : ExpandGraph(g))
    if (c.mode == "frontend") return c.args;
  return {};
}

bool HasFlag(const std::vector<std::string>& args, const std::string& flag, const std::string& value) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag && args[i + 1] == value) return true;
  return false;
}

TEST(GraphParserKeys, AreTheFrontendsParserFlags) {
  auto g = ParseGraph("frontend:\n  port: 8000\n  reasoning_parser: deepseek_r1\n  tool_call_parser: pythonic\n"
                      "workers: [{mode: agg}]\n", "/graphs", "g.yaml");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const auto args = FrontendArgs(*g);
  EXPECT_TRUE(HasFlag(args, "--reasoning-parser", "deepseek_r1"));
  EXPECT_TRUE(HasFlag(args, "--tool-call-parser", "pythonic"));
  auto plain = ParseGraph("frontend: {port: 8000}\nworkers: [{mode: agg}]\n", "/graphs", "g.yaml");
  ASSERT_TRUE(plain.ok());
  for (const std::string& a : FrontendArgs(*plain)) EXPECT_EQ(a.find("parser"), std::string::npos) << a;
}

TEST(GraphParserKeys, BadNamesNameTheLine) {
  for (const char* key : {"reasoning_parser", "tool_call_parser"}) {
    auto bad = ParseGraph(std::string("frontend:\n  port: 8000\n  ") + key + ": gpt\nworkers: [{mode: agg}]\n",
                          "/graphs", "g.yaml");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("g.yaml:3"), std::string::npos) << bad.status().message();
    EXPECT_NE(bad.status().message().find(key), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace tandem::runtime
