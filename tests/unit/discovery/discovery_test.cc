// The embedded discovery (file_discovery.h): register / list / expiry / lease destruction / watch.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "discovery/file_discovery.h"

namespace tandem::runtime {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class DiscoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tandem-discovery-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::unique_ptr<Discovery> Make(std::chrono::milliseconds ttl = 3000ms,
                                  std::chrono::milliseconds refresh = 1000ms) {
    return MakeFileDiscovery({root_.string(), ttl, refresh});
  }
  static InstanceInfo Worker(const std::string& id, const std::string& endpoint) {
    InstanceInfo info;
    info.namespace_name = "ns";
    info.component = kComponentAgg;
    info.instance_id = id;
    info.endpoint = endpoint;
    info.metadata = {{"model", "tiny"}, {"max_model_len", 128}};
    return info;
  }
  fs::path root_;
};

TEST_F(DiscoveryTest, RegisterThenListShowsTheInstanceWithItsMetadata) {
  auto d = Make();
  auto lease = d->Register(Worker("w1", "127.0.0.1:1234"));
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ((*lease)->info().key(), "ns/agg/w1");
  EXPECT_TRUE(fs::exists(root_ / "ns" / "agg" / "w1.json"));
  auto list = d->List("ns", kComponentAgg);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].instance_id, "w1");
  EXPECT_EQ((*list)[0].endpoint, "127.0.0.1:1234");
  EXPECT_EQ((*list)[0].metadata["max_model_len"], 128);
  // Other components and namespaces are separate.
  EXPECT_TRUE(d->List("ns", kComponentPrefill)->empty());
  EXPECT_TRUE(d->List("other", kComponentAgg)->empty());
}

TEST_F(DiscoveryTest, ListIsSortedAndAGeneratedIdIsUnique) {
  auto d = Make();
  auto b = d->Register(Worker("b", "h:2"));
  auto a = d->Register(Worker("a", "h:1"));
  auto g1 = d->Register(Worker("", "h:3"));
  auto g2 = d->Register(Worker("", "h:4"));
  ASSERT_TRUE(a.ok() && b.ok() && g1.ok() && g2.ok());
  EXPECT_FALSE((*g1)->info().instance_id.empty());
  EXPECT_NE((*g1)->info().instance_id, (*g2)->info().instance_id);
  auto list = d->List("ns", kComponentAgg);
  ASSERT_EQ(list->size(), 4u);
  for (size_t i = 1; i < list->size(); ++i)
    EXPECT_LT((*list)[i - 1].instance_id, (*list)[i].instance_id);
}

TEST_F(DiscoveryTest, DestroyingTheLeaseDeregistersAtOnce) {
  auto d = Make();
  {
    auto lease = d->Register(Worker("w1", "h:1"));
    ASSERT_TRUE(lease.ok());
    EXPECT_EQ(d->List("ns", kComponentAgg)->size(), 1u);
  }
  EXPECT_TRUE(d->List("ns", kComponentAgg)->empty());
  EXPECT_FALSE(fs::exists(root_ / "ns" / "agg" / "w1.json"));
}

TEST_F(DiscoveryTest, TheHeartbeatKeepsALeaseAlivePastItsTtl) {
  auto d = Make(1000ms, 100ms);
  auto lease = d->Register(Worker("w1", "h:1"));
  ASSERT_TRUE(lease.ok());
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(d->List("ns", kComponentAgg)->size(), 1u);
  EXPECT_TRUE((*lease)->status().ok());
}

TEST_F(DiscoveryTest, AnEntryThatIsNotRefreshedExpires) {
  auto d = Make(1000ms, 100ms);
  // Write an entry by hand for a live process (this one) whose expiry passes.
  auto lease = d->Register(Worker("w1", "h:1"));
  ASSERT_TRUE(lease.ok());
  const fs::path file = root_ / "ns" / "agg" / "w1.json";
  fs::copy_file(file, root_ / "ns" / "agg" / "stale.json");
  std::string text;
  {
    std::ifstream in(root_ / "ns" / "agg" / "stale.json");
    std::getline(in, text, '\0');
  }
  auto j = nlohmann::json::parse(text);
  j["instance_id"] = "stale";
  { std::ofstream(root_ / "ns" / "agg" / "stale.json") << j.dump(); }
  EXPECT_EQ(d->List("ns", kComponentAgg)->size(), 2u);
  std::this_thread::sleep_for(1500ms);
  auto list = d->List("ns", kComponentAgg);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].instance_id, "w1");
}

TEST_F(DiscoveryTest, AKilledProcessDisappearsAtOnceOnItsHost) {
  auto d = Make(60000ms, 1000ms);  // a long TTL: only the pid check can remove it
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto cd = MakeFileDiscovery({root_.string(), 60000ms, 1000ms});
    auto lease = cd->Register(Worker("child", "h:9"));
    if (!lease.ok()) _exit(1);
    pause();
    _exit(0);
  }
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    seen = d->List("ns", kComponentAgg)->size() == 1;
    if (!seen) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(seen);
  kill(child, SIGKILL);
  // A zombie (not yet reaped) already counts as gone.
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(d->List("ns", kComponentAgg)->empty());
  waitpid(child, nullptr, 0);
  EXPECT_TRUE(d->List("ns", kComponentAgg)->empty());
  EXPECT_FALSE(fs::exists(root_ / "ns" / "agg" / "child.json"));  // cleaned up by List
}

TEST_F(DiscoveryTest, ALiveKeyCannotBeTakenTwiceAndBadNamesAreRefused) {
  auto d = Make();
  auto first = d->Register(Worker("w1", "h:1"));
  ASSERT_TRUE(first.ok());
  auto second = d->Register(Worker("w1", "h:2"));
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  auto bad = d->Register(Worker("../x", "h:3"));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  InstanceInfo no_component = Worker("w2", "h:4");
  no_component.component.clear();
  EXPECT_EQ(d->Register(no_component).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(DiscoveryTest, WatchReportsJoinsAndLeaves) {
  auto d = Make();
  std::mutex mu;
  std::vector<size_t> sizes;
  auto watch = d->WatchComponent("ns", kComponentAgg, [&](const std::vector<InstanceInfo>& list) {
    std::lock_guard<std::mutex> lock(mu);
    sizes.push_back(list.size());
  }, 20ms);
  auto wait_for = [&](std::vector<size_t> want) {
    for (int i = 0; i < 300; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (sizes == want) return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  EXPECT_TRUE(wait_for({0}));
  auto lease = d->Register(Worker("w1", "h:1"));
  EXPECT_TRUE(wait_for({0, 1}));
  lease->reset();
  EXPECT_TRUE(wait_for({0, 1, 0}));
  watch.reset();
}

TEST(DiscoveryJson, InstanceRoundTrip) {
  InstanceInfo info;
  info.namespace_name = "ns";
  info.component = "decode";
  info.instance_id = "abc";
  info.endpoint = "10.0.0.1:5000";
  info.metadata = {{"model", "m"}, {"vocab_size", 7}};
  auto back = InstanceFromJson(ToJson(info));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(ToJson(*back), ToJson(info));
  EXPECT_FALSE(InstanceFromJson(nlohmann::json::array()).ok());
  EXPECT_FALSE(InstanceFromJson({{"namespace", "ns"}}).ok());
}

}  // namespace
}  // namespace tandem::runtime
