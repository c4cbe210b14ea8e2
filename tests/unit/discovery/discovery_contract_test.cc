// The Discovery contract (discovery.h), run against the embedded file discovery and against a
// real etcd (etcd_discovery.h) started on a free loopback port; plus what is etcd's own: a killed
// process's key expiring with its lease, an unreachable or vanished etcd as a clear error.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "cluster_servers.h"
#include "discovery/etcd_client.h"
#include "discovery/etcd_discovery.h"
#include "discovery/file_discovery.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::EtcdServer;
using testing::FreePort;
using testing::ServerProcess;

constexpr auto kEtcdTtl = 2s;

template <typename F>
bool Eventually(F f, std::chrono::milliseconds timeout = 10s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (f()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return f();
}

InstanceInfo Worker(const std::string& id, const std::string& endpoint) {
  InstanceInfo info;
  info.namespace_name = "ns";
  info.component = kComponentDecode;
  info.instance_id = id;
  info.endpoint = endpoint;
  info.metadata = {{"model", "tiny"}, {"max_model_len", 128}};
  return info;
}

// The discovery a `--discovery` URL names, with the short TTLs these tests use.
Result<std::unique_ptr<Discovery>> MakeForTest(const std::string& url) {
  if (url.rfind("etcd://", 0) == 0) {
    EtcdDiscoveryOptions o;
    o.port = std::stoi(url.substr(url.rfind(':') + 1));
    o.ttl = kEtcdTtl;
    o.timeout = 1000ms;
    return MakeEtcdDiscovery(o);
  }
  return MakeFileDiscovery({url.substr(7), 3000ms, 1000ms});
}

class DiscoveryContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "etcd") {
      TANDEM_START_OR_SKIP(etcd_);
      url_ = etcd_.url();
    } else {
      root_ = fs::temp_directory_path() / ("tandem-contract-" + std::to_string(getpid()) + "-" +
                                           std::to_string(FreePort()));
      fs::remove_all(root_);
      url_ = "file://" + root_.string();
    }
    auto d = MakeForTest(url_);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    discovery_ = std::move(*d);
  }
  void TearDown() override {
    discovery_.reset();
    if (!root_.empty()) fs::remove_all(root_);
  }
  std::vector<std::string> Ids() {
    auto list = discovery_->List("ns", kComponentDecode);
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    std::vector<std::string> ids;
    if (list.ok()) {
      for (const auto& i : *list) ids.push_back(i.instance_id);
    }
    return ids;
  }

  EtcdServer etcd_;
  fs::path root_;
  std::string url_;
  std::unique_ptr<Discovery> discovery_;
};

TEST_P(DiscoveryContractTest, RegisterThenListShowsTheInstanceWithItsMetadata) {
  auto lease = discovery_->Register(Worker("w1", "127.0.0.1:5001"));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_TRUE((*lease)->status().ok());
  auto list = discovery_->List("ns", kComponentDecode);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].endpoint, "127.0.0.1:5001");
  EXPECT_EQ((*list)[0].metadata["model"], "tiny");
  EXPECT_EQ((*list)[0].metadata["max_model_len"], 128);
  EXPECT_TRUE(discovery_->List("ns", kComponentPrefill)->empty());
  EXPECT_TRUE(discovery_->List("other", kComponentDecode)->empty());
}

TEST_P(DiscoveryContractTest, ListIsSortedAndGeneratedIdsAreUnique) {
  auto b = discovery_->Register(Worker("b", "h:2"));
  auto a = discovery_->Register(Worker("a", "h:1"));
  auto g1 = discovery_->Register(Worker("", "h:3"));
  auto g2 = discovery_->Register(Worker("", "h:4"));
  ASSERT_TRUE(a.ok() && b.ok() && g1.ok() && g2.ok());
  EXPECT_NE((*g1)->info().instance_id, (*g2)->info().instance_id);
  auto ids = Ids();
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
}

TEST_P(DiscoveryContractTest, DestroyingTheLeaseDeregistersAtOnce) {
  auto lease = discovery_->Register(Worker("w1", "h:1"));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(Ids().size(), 1u);
  lease->reset();
  EXPECT_TRUE(Ids().empty());
  // The key is free again.
  EXPECT_TRUE(discovery_->Register(Worker("w1", "h:1")).ok());
}

TEST_P(DiscoveryContractTest, KeepAliveHoldsTheKeyPastItsTtl) {
  auto lease = discovery_->Register(Worker("w1", "h:1"));
  ASSERT_TRUE(lease.ok());
  std::this_thread::sleep_for(GetParam() == "etcd" ? kEtcdTtl * 2 : 4000ms);
  EXPECT_EQ(Ids(), std::vector<std::string>{"w1"});
  EXPECT_TRUE((*lease)->status().ok()) << (*lease)->status().ToString();
}

TEST_P(DiscoveryContractTest, ALiveKeyCannotBeTakenTwiceAndBadNamesAreRefused) {
  auto first = discovery_->Register(Worker("w1", "h:1"));
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(discovery_->Register(Worker("w1", "h:2")).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(Ids().size(), 1u);
  EXPECT_EQ(discovery_->Register(Worker("../x", "h:3")).status().code(),
            StatusCode::kInvalidArgument);
  InstanceInfo no_component = Worker("w2", "h:4");
  no_component.component.clear();
  EXPECT_EQ(discovery_->Register(no_component).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(discovery_->List("bad/ns", kComponentDecode).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_P(DiscoveryContractTest, WatchReportsJoinsAndLeaves) {
  std::mutex mu;
  std::vector<size_t> sizes;
  auto watch = discovery_->WatchComponent("ns", kComponentDecode,
                                          [&](const std::vector<InstanceInfo>& list) {
                                            std::lock_guard<std::mutex> lock(mu);
                                            sizes.push_back(list.size());
                                          },
                                          20ms);
  auto seen = [&](std::vector<size_t> want) {
    return Eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return sizes == want;
    });
  };
  EXPECT_TRUE(seen({0}));
  auto lease = discovery_->Register(Worker("w1", "h:1"));
  EXPECT_TRUE(seen({0, 1}));
  lease->reset();
  EXPECT_TRUE(seen({0, 1, 0}));
  watch.reset();
}

// A child process registers and sleeps; SIGKILL leaves no one to deregister: the key must go by
// itself (file discovery: at once, the pid is gone; etcd: when the lease expires).
TEST_P(DiscoveryContractTest, AKilledProcessDisappearsWithinItsTtl) {
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  ::setenv("TANDEM_DISCOVERY_CHILD_URL", url_.c_str(), 1);
  ServerProcess child;
  ASSERT_TRUE(child.Spawn({self, "--gtest_filter=DiscoveryChild.RegisterAndWait"},
                          "/tmp/tandem-discovery-child-" + std::to_string(getpid()) + ".log"));
  ::unsetenv("TANDEM_DISCOVERY_CHILD_URL");
  ASSERT_TRUE(Eventually([&] { return Ids() == std::vector<std::string>{"child"}; }, 20s))
      << "the child never registered";
  child.Kill();  // SIGKILL
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return Ids().empty(); }, 15s));
  const auto gone_after = std::chrono::steady_clock::now() - killed;
  const auto limit = GetParam() == "etcd" ? kEtcdTtl + 2500ms : 1000ms;
  EXPECT_LE(gone_after, limit) << std::chrono::duration<double>(gone_after).count() << " s";
  std::remove(("/tmp/tandem-discovery-child-" + std::to_string(getpid()) + ".log").c_str());
}

// Runs only as the child of the test above.
TEST(DiscoveryChild, RegisterAndWait) {
  const char* url = std::getenv("TANDEM_DISCOVERY_CHILD_URL");
  if (!url) GTEST_SKIP() << "the child half of AKilledProcessDisappearsWithinItsTtl";
  auto d = MakeForTest(url);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto lease = (*d)->Register(Worker("child", "h:9"));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  std::this_thread::sleep_for(60s);  // killed long before
}

INSTANTIATE_TEST_SUITE_P(Backends, DiscoveryContractTest, ::testing::Values("file", "etcd"),
                         [](const auto& info) { return info.param; });

// ---- etcd only ----

TEST(EtcdDiscovery, UnreachableEtcdIsAClearErrorNamingTheEndpoint) {
  const int port = FreePort();  // nothing listens there
  const auto start = std::chrono::steady_clock::now();
  auto d = MakeDiscovery("etcd://127.0.0.1:" + std::to_string(port));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("http://127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << d.status().message();
}

TEST(EtcdDiscovery, EtcdGoingAwayFailsListsAndLeasesClearlyWithoutHanging) {
  EtcdServer etcd;
  TANDEM_START_OR_SKIP(etcd);
  auto d = MakeForTest(etcd.url());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto lease = (*d)->Register(Worker("w1", "h:1"));
  ASSERT_TRUE(lease.ok());
  etcd.Kill();
  const auto start = std::chrono::steady_clock::now();
  auto list = (*d)->List("ns", kComponentDecode);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("127.0.0.1:" + std::to_string(etcd.port())),
            std::string::npos)
      << list.status().message();
  EXPECT_TRUE(Eventually([&] { return !(*lease)->status().ok(); }, 5s));
  EXPECT_NE((*lease)->status().message().find("etcd at"), std::string::npos);
  const auto destroy = std::chrono::steady_clock::now();
  lease->reset();  // the revoke fails within its timeout
  EXPECT_LT(std::chrono::steady_clock::now() - destroy, 5s);
}

TEST(EtcdDiscovery, UrlsAreParsed) {
  EXPECT_TRUE(ValidateDiscoveryUrl("").ok());
  EXPECT_TRUE(ValidateDiscoveryUrl("file").ok());
  EXPECT_TRUE(ValidateDiscoveryUrl("file:///tmp/x").ok());
  EXPECT_TRUE(ValidateDiscoveryUrl("etcd://127.0.0.1:2379").ok());
  EXPECT_TRUE(ValidateDiscoveryUrl("etcd://localhost").ok());
  EXPECT_FALSE(ValidateDiscoveryUrl("file://relative").ok());
  EXPECT_FALSE(ValidateDiscoveryUrl("etcd://h:99999").ok());
  EXPECT_FALSE(ValidateDiscoveryUrl("etcd://").ok());
  EXPECT_FALSE(ValidateDiscoveryUrl("consul://h:1").ok());
  EXPECT_EQ(DescribeDiscovery("etcd://h:12"), "etcd http://h:12");
}

TEST(EtcdClient, Base64AndPrefixRangeEnd) {
  for (const std::string& s :
       std::vector<std::string>{"", "a", "ab", "abc", "abcd", std::string("\0\xff\x10", 3)}) {
    auto back = Base64Decode(Base64Encode(s));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, s);
  }
  EXPECT_EQ(Base64Encode("tandem/"), "dGFuZGVtLw==");
  EXPECT_EQ(PrefixRangeEnd("a/"), "a0");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff", 2)), "b");
}

}  // namespace
}  // namespace tandem::runtime
