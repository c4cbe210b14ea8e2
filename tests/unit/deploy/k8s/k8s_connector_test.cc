// The planner's Kubernetes connector (deploy/k8s/k8s_connector.h) against a stand-in API server
// over real TLS (tests/tools/fake_k8s_api.py, a certificate made here with the openssl CLI): the
// scale subresource read and written with the service account's token, the PUT bodies valid
// autoscaling/v1 Scale objects by kubernetes-models' schemas (tests/k8s/validate_manifests.mjs),
// a manual edit racing the planner a 409 that leaves the edit in place, a wrong token or CA an
// error, not a scale.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "deploy/k8s/k8s_connector.h"

namespace tandem::k8s {
namespace {

namespace fs = std::filesystem;

std::string Shell(const std::string& cmd, int* rc = nullptr) {
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  if (rc) *rc = status;
  return out;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class K8sConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem-k8s-conn-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* name : {"ca", "other"}) {
      int rc = 0;
      const std::string out = Shell("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
                                  "-addext subjectAltName=IP:127.0.0.1 -keyout '" + (dir_ / (std::string(name) + ".key")).string() +
                                  "' -out '" + (dir_ / (std::string(name) + ".crt")).string() + "'", &rc);
      ASSERT_EQ(rc, 0) << out;
    }
    std::ofstream(dir_ / "token") << "sekret-token\n";
  }
  void TearDown() override {
    if (server_pid_ > 0) kill(server_pid_, SIGKILL);
    fs::remove_all(dir_);
  }

  // Starts the stand-in with these Deployments ("name=replicas") and extra flags; its port.
  int StartServer(const std::string& deployments, const std::string& extra = "") {
    const std::string cmd = "/usr/bin/python3 " TANDEM_TESTS_DIR "/tools/fake_k8s_api.py '" +
                            (dir_ / "ca.crt").string() + "' '" + (dir_ / "ca.key").string() + "' '" +
                            (dir_ / "port").string() + "' '" + (dir_ / "log.jsonl").string() +
                            "' sekret-token llm " + deployments + " " + extra + " > '" +
                            (dir_ / "server.out").string() + "' 2>&1 & echo $!";
    server_pid_ = std::stoi(Shell(cmd));
    for (int i = 0; i < 200 && !fs::exists(dir_ / "port"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    EXPECT_TRUE(fs::exists(dir_ / "port")) << Slurp(dir_ / "server.out");
    return fs::exists(dir_ / "port") ? std::stoi(Slurp(dir_ / "port")) : 0;
  }

  std::unique_ptr<K8sConnector> Connector(int port, const std::string& ca = "ca.crt") {
    K8sConnectorOptions o;
    o.api_host = "127.0.0.1";
    o.api_port = port;
    o.token_file = (dir_ / "token").string();
    o.ca_file = (dir_ / ca).string();
    o.namespace_name = "llm";
    o.prefill_deployment = "g-prefill";
    o.decode_deployment = "g-decode";
    auto c = K8sConnector::Create(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }

  std::vector<nlohmann::json> Requests() {
    std::vector<nlohmann::json> out;
    std::istringstream in(Slurp(dir_ / "log.jsonl"));
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  fs::path dir_;
  pid_t server_pid_ = -1;
};

TEST_F(K8sConnectorTest, ReadsAndScalesTheDeploymentsWithValidScaleObjects) {
  const int port = StartServer("g-prefill=1 g-decode=2");
  ASSERT_GT(port, 0);
  auto conn = Connector(port);
  ASSERT_NE(conn, nullptr);
  auto now = conn->Current();
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(*now, (planner::RoleCounts{1, 2}));
  ASSERT_TRUE(conn->Apply({3, 2}).ok());
  now = conn->Current();
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(*now, (planner::RoleCounts{3, 2}));

  std::string puts_yaml;
  int num_puts = 0;
  for (const nlohmann::json& r : Requests()) {
    EXPECT_EQ(r["auth"], "Bearer sekret-token");
    if (r["method"] != "PUT") continue;
    ++num_puts;
    EXPECT_EQ(r["path"], "/apis/apps/v1/namespaces/llm/deployments/g-prefill/scale");  // decode unchanged
    EXPECT_EQ(r["content_type"], "application/json");
    const nlohmann::json body = nlohmann::json::parse(r["body"].get<std::string>());
    EXPECT_EQ(body["spec"]["replicas"], 3);
    EXPECT_EQ(body["metadata"]["resourceVersion"], "1");  // as read: the optimistic-concurrency check
    EXPECT_FALSE(body.contains("status"));
    puts_yaml += "---\n" + body.dump() + "\n";
  }
  EXPECT_EQ(num_puts, 1);
  std::ofstream(dir_ / "puts.yaml") << puts_yaml;
  int rc = 0;
  const std::string out = Shell("node " TANDEM_TESTS_DIR "/k8s/validate_manifests.mjs '" + (dir_ / "puts.yaml").string() + "'", &rc);
  EXPECT_EQ(rc, 0) << out;
}

TEST_F(K8sConnectorTest, AManualEditRacingThePlannerWinsAndIsReadNextTime) {
  const int port = StartServer("g-prefill=1 g-decode=1", "--edit-on-first-put g-prefill=5");
  ASSERT_GT(port, 0);
  auto conn = Connector(port);
  ASSERT_NE(conn, nullptr);
  Status st = conn->Apply({2, 1});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("409"), std::string::npos) << st.message();
  auto now = conn->Current();
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->prefill, 5);  // the edit stands; the planner loop takes it as a bound
}

TEST_F(K8sConnectorTest, AWrongTokenOrCertificateIsAnErrorNotAScale) {
  const int port = StartServer("g-prefill=1 g-decode=1");
  ASSERT_GT(port, 0);
  std::ofstream(dir_ / "token") << "wrong\n";
  auto conn = Connector(port);
  ASSERT_NE(conn, nullptr);
  auto now = conn->Current();
  ASSERT_FALSE(now.ok());
  EXPECT_NE(now.status().message().find("HTTP 401"), std::string::npos) << now.status().message();
  std::ofstream(dir_ / "token") << "sekret-token\n";
  auto other = Connector(port, "other.crt");  // a CA that did not sign the server's certificate
  ASSERT_NE(other, nullptr);
  now = other->Current();
  ASSERT_FALSE(now.ok());
  EXPECT_NE(now.status().message().find("certificate"), std::string::npos) << now.status().message();
  for (const nlohmann::json& r : Requests()) EXPECT_NE(r["method"], "PUT");
}

TEST(K8sScale, ReplicasOfAScaleObject) {
  EXPECT_EQ(*ScaleReplicas(nlohmann::json::parse(R"({"spec":{"replicas":4}})")), 4);
  EXPECT_EQ(*ScaleReplicas(nlohmann::json::parse(R"({"spec":{}})")), 0);  // omitted when 0
  EXPECT_FALSE(ScaleReplicas(nlohmann::json::parse(R"({"spec":{"replicas":-1}})")).ok());
  EXPECT_FALSE(ScaleReplicas(nlohmann::json::parse(R"({"status":{}})")).ok());
  EXPECT_EQ(ScalePath("ns", "d"), "/apis/apps/v1/namespaces/ns/deployments/d/scale");
}

}  // namespace
}  // namespace tandem::k8s
