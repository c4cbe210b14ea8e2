// deploy/k8s/yaml_emit.h: block YAML from ordered JSON that reads back (yaml-cpp) as the same
// values.
#include "deploy/k8s/yaml_emit.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

namespace tandem::k8s {
namespace {

using json = nlohmann::ordered_json;

TEST(YamlEmitTest, QuotesWhatWouldReadBackAsAnotherType) {
  for (const char* s : {"8000", "1.5", "0.9", "1e3", "0x1F", "0o7", "+1", ".5", "1_000", "1:30",
                        "true", "False", "yes", "no", "on", "OFF", "null", "~", "y", "N", "",
                        "$(POD_IP)", "a: b", "-", "x:", "#c", "*a", "&a", "!t", "[1]", "{a}", "a b",
                        "'q'", "\"q\"", "|", ">", "@x", "%x", ".inf", ".NaN"}) {
    EXPECT_FALSE(IsPlainSafe(s)) << s;
  }
  for (const char* s : {"tandem", "--port", "cuda:0", "etcd://demo-etcd:2379", "16Gi", "100m",
                        "/dev/shm", "app.kubernetes.io/name", "repo/tandem:1.0", "0.0.0.0",
                        "--listen-client-urls=http://0.0.0.0:2379", "a-b_c.d"}) {
    EXPECT_TRUE(IsPlainSafe(s)) << s;
  }
}

TEST(YamlEmitTest, RoundTripsThroughYamlCpp) {
  json doc = {{"kind", "Deployment"},
              {"n", 3},
              {"b", true},
              {"s", "8000"},
              {"odd key: x", "$(POD_IP)"},
              {"empty_map", json::object()},
              {"empty_list", json::array()},
              {"list", json::array({"a", "true", 1, json{{"name", "x"}, {"v", json::array({"1", "2"})}},
                                    json::array({"n1", "n2"})})},
              {"nested", {{"a", {{"b", "c"}}}}}};
  const std::string text = EmitYaml(doc);
  YAML::Node n = YAML::Load(text);
  EXPECT_EQ(n["kind"].as<std::string>(), "Deployment");
  EXPECT_EQ(n["n"].as<int>(), 3);
  EXPECT_EQ(n["b"].as<bool>(), true);
  EXPECT_EQ(n["s"].Tag(), "!");  // quoted: a string, not an int
  EXPECT_EQ(n["s"].as<std::string>(), "8000");
  EXPECT_EQ(n["odd key: x"].as<std::string>(), "$(POD_IP)");
  EXPECT_TRUE(n["empty_map"].IsMap() && n["empty_map"].size() == 0);
  EXPECT_TRUE(n["empty_list"].IsSequence() && n["empty_list"].size() == 0);
  EXPECT_EQ(n["list"][1].Tag(), "!");
  EXPECT_EQ(n["list"][3]["name"].as<std::string>(), "x");
  EXPECT_EQ(n["list"][3]["v"][1].as<std::string>(), "2");
  EXPECT_EQ(n["list"][4][1].as<std::string>(), "n2");
  EXPECT_EQ(n["nested"]["a"]["b"].as<std::string>(), "c");
  // Insertion order; "n" quoted (YAML 1.1 reads a plain n as false).
  EXPECT_EQ(text.substr(0, 26), "kind: Deployment\n\"n\": 3\nb:");
}

}  // namespace
}  // namespace tandem::k8s
