// Transfer agent tests that run on every in-process backend: local (memcpy), tcp, and ucx and
// libfabric where built (two agents in this process, the backend forced by the override).
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "transfer_test_util.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using testing::Checksum;
using testing::FillRandom;
using testing::MakeAgent;
using testing::WaitEnd;

constexpr uint64_t kBlock = 4096;

// The backends under test: local and tcp, and ucx / libfabric where built (CMake found them).
std::vector<std::string> TestedBackends() {
  std::vector<std::string> v = {"local", "tcp"};
#ifdef TANDEM_HAVE_UCX
  v.push_back("ucx");
#endif
#ifdef TANDEM_HAVE_LIBFABRIC
  v.push_back("libfabric");
#endif
  return v;
}

// local and tcp, plus the backend under test (both sides must advertise it).
std::vector<std::string> BackendsWith(const std::string& backend) {
  std::vector<std::string> v = {"local", "tcp"};
  if (backend != "local" && backend != "tcp") v.push_back(backend);
  return v;
}

class AgentTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    AgentOptions probe;
    probe.name = "probe";
    probe.backends = {GetParam()};
    auto usable = Agent::Create(probe);  // the library may find no transport at run time: skip, saying why
    if (!usable.ok() && usable.status().code() == StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << GetParam() << " backend unusable here: " << usable.status().ToString();
    }
    ASSERT_TRUE(usable.ok()) << usable.status().ToString();
    initiator_ = MakeAgent("prefill", BackendsWith(GetParam()), {}, GetParam());
    target_ = MakeAgent("decode", BackendsWith(GetParam()));
    ASSERT_TRUE(initiator_ && target_);
    src_.resize(kSize);
    dst_.assign(kSize, 0);
    FillRandom(src_, 1);
    src_reg_ = std::move(initiator_->RegisterMemory(src_.data(), src_.size()).value());
    dst_reg_ = std::move(target_->RegisterMemory(dst_.data(), dst_.size()).value());
    Reload();
  }
  void Reload() {
    auto peer = initiator_->LoadPeerMetadata(target_->ExportMetadata());
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    ASSERT_EQ(*peer, "decode");
  }
  // One descriptor pair per block: src block s_i -> dst block d_i.
  std::pair<DescList, DescList> Blocks(const std::vector<std::pair<uint64_t, uint64_t>>& pairs) {
    DescList l, r;
    for (auto [s, d] : pairs) {
      l.Add(src_.data() + s * kBlock, kBlock);
      r.Add(dst_.data() + d * kBlock, kBlock);
    }
    return {l, r};
  }

  static constexpr uint64_t kSize = 8 << 20;
  std::unique_ptr<Agent> initiator_, target_;
  std::vector<uint8_t> src_, dst_;
  Registration src_reg_, dst_reg_;
};

TEST_P(AgentTest, PicksTheOverriddenOrBestBackend) {
  EXPECT_EQ(initiator_->BackendFor("decode").value(), GetParam());
  auto plain = MakeAgent("plain");
  ASSERT_TRUE(plain->LoadPeerMetadata(target_->ExportMetadata()).ok());
  EXPECT_EQ(plain->BackendFor("decode").value(), "local");  // same process: memcpy wins
}

TEST_P(AgentTest, WriteThenRead) {
  DescList l, r;
  l.Add(src_.data(), 1 << 20);
  r.Add(dst_.data() + 4096, 1 << 20);
  auto h = initiator_->Post(Op::kWrite, l, r, "decode");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(WaitEnd(*h), TransferState::kDone) << h->status().ToString();
  EXPECT_EQ(h->backend(), GetParam());
  EXPECT_EQ(h->bytes(), 1u << 20);
  EXPECT_GT(h->seconds(), 0.0);
  EXPECT_EQ(std::memcmp(src_.data(), dst_.data() + 4096, 1 << 20), 0);

  // READ: fill another part of dst and pull it into src.
  for (size_t i = 0; i < 65536; ++i) dst_[(2 << 20) + i] = static_cast<uint8_t>(i * 7);
  DescList l2, r2;
  l2.Add(src_.data() + (4 << 20), 65536);
  r2.Add(dst_.data() + (2 << 20), 65536);
  auto h2 = initiator_->Post(Op::kRead, l2, r2, "decode");
  ASSERT_TRUE(h2.ok());
  ASSERT_EQ(WaitEnd(*h2), TransferState::kDone) << h2->status().ToString();
  EXPECT_EQ(std::memcmp(src_.data() + (4 << 20), dst_.data() + (2 << 20), 65536), 0);
}

TEST_P(AgentTest, ManyScatteredDescriptors) {
  // 1024 blocks, each to a permuted destination: nothing coalesces.
  std::vector<std::pair<uint64_t, uint64_t>> pairs;
  for (uint64_t i = 0; i < 1024; ++i) pairs.push_back({i * 2, (i * 739) % 2048});
  auto [l, r] = Blocks(pairs);
  auto h = initiator_->Post(Op::kWrite, l, r, "decode");
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(WaitEnd(*h), TransferState::kDone) << h->status().ToString();
  EXPECT_EQ(h->num_regions(), 1024u);
  for (auto [s, d] : pairs) {
    ASSERT_EQ(std::memcmp(src_.data() + s * kBlock, dst_.data() + d * kBlock, kBlock), 0) << s;
  }
}

TEST_P(AgentTest, ConsecutiveBlocksCoalesce) {
  // 16 consecutive blocks on both sides, then a gap, then 8 more: two regions.
  std::vector<std::pair<uint64_t, uint64_t>> pairs;
  for (uint64_t i = 0; i < 16; ++i) pairs.push_back({100 + i, 500 + i});
  for (uint64_t i = 0; i < 8; ++i) pairs.push_back({200 + i, 516 + i});  // contiguous remote, not local
  auto [l, r] = Blocks(pairs);
  auto h = initiator_->Post(Op::kWrite, l, r, "decode");
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(WaitEnd(*h), TransferState::kDone);
  EXPECT_EQ(h->num_regions(), 2u);
  EXPECT_EQ(std::memcmp(src_.data() + 100 * kBlock, dst_.data() + 500 * kBlock, 16 * kBlock), 0);
  EXPECT_EQ(std::memcmp(src_.data() + 200 * kBlock, dst_.data() + 516 * kBlock, 8 * kBlock), 0);
  TransferStats s = initiator_->stats();
  EXPECT_EQ(s.num_regions, 2u);
  EXPECT_EQ(s.num_descriptors, 24u);
}

TEST_P(AgentTest, NotificationArrivesAfterTheData) {
  // A callback checks, when the notification arrives, that the bytes are already there.
  std::vector<uint8_t> dst(kSize, 0);
  std::atomic<int> seen{0};
  std::atomic<bool> data_was_there{false};
  std::string message;
  std::mutex mu;
  AgentOptions o;
  o.name = "decode-cb";
  o.backends = BackendsWith(GetParam());
  o.on_notification = [&](const Notification& n) {
    data_was_there = std::memcmp(dst.data(), src_.data(), kSize) == 0;
    std::lock_guard lock(mu);
    message = n.peer + "/" + n.message;
    seen++;
  };
  auto target = std::move(Agent::Create(o).value());
  auto reg = std::move(target->RegisterMemory(dst.data(), dst.size()).value());
  ASSERT_TRUE(initiator_->LoadPeerMetadata(target->ExportMetadata()).ok());
  DescList l, r;
  l.Add(src_.data(), kSize);
  r.Add(dst.data(), kSize);
  auto h = initiator_->Post(Op::kWrite, l, r, "decode-cb", "req-1 first_token=42");
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(WaitEnd(*h), TransferState::kDone);
  EXPECT_EQ(seen.load(), 1);  // delivered before the initiator saw completion
  EXPECT_TRUE(data_was_there.load());
  std::lock_guard lock(mu);
  EXPECT_EQ(message, "prefill/req-1 first_token=42");
}

TEST_P(AgentTest, NotificationsQueueAndDrain) {
  for (int i = 0; i < 3; ++i) {
    auto [l, r] = Blocks({{static_cast<uint64_t>(i), static_cast<uint64_t>(i)}});
    auto h = initiator_->Post(i == 1 ? Op::kRead : Op::kWrite, l, r, "decode", "n" + std::to_string(i));
    ASSERT_TRUE(h.ok());
    ASSERT_EQ(WaitEnd(*h), TransferState::kDone);
  }
  auto notes = target_->GetNotifications();
  ASSERT_EQ(notes.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(notes[i].peer, "prefill");
    EXPECT_EQ(notes[i].message, "n" + std::to_string(i));
  }
  EXPECT_TRUE(target_->GetNotifications().empty());
  auto [l, r] = Blocks({{0, 0}});
  auto h = initiator_->Post(Op::kWrite, l, r, "decode");  // no message: no notification
  ASSERT_EQ(WaitEnd(*h), TransferState::kDone);
  EXPECT_TRUE(target_->GetNotifications().empty());
}

TEST_P(AgentTest, PostRejectsBadDescriptors) {
  auto expect_invalid = [&](const DescList& l, const DescList& r, const char* what) {
    auto h = initiator_->Post(Op::kWrite, l, r, "decode");
    ASSERT_FALSE(h.ok()) << what;
    EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument) << what << ": " << h.status().ToString();
  };
  DescList l, r;
  l.Add(src_.data(), 4096);
  r.Add(dst_.data() + kSize - 2048, 4096);  // past the end of the peer's region
  expect_invalid(l, r, "remote out of bounds");
  DescList l2, r2;
  l2.Add(src_.data() + kSize - 100, 4096);  // past the end of ours
  r2.Add(dst_.data(), 4096);
  expect_invalid(l2, r2, "local out of bounds");
  DescList l3, r3;
  l3.Add(src_.data(), 4096);
  r3.Add(dst_.data(), 2048);
  expect_invalid(l3, r3, "length mismatch");
  DescList l4, r4;
  l4.Add(src_.data(), 4096);
  l4.Add(src_.data() + 4096, 4096);
  r4.Add(dst_.data(), 4096);
  expect_invalid(l4, r4, "list size mismatch");
  DescList l5, r5;
  l5.Add(src_.data(), 0);
  r5.Add(dst_.data(), 0);
  expect_invalid(l5, r5, "zero length");
  // The same errors where a pair continues the previous one (Coalesce merges those without a
  // region lookup).
  DescList l5b, r5b;
  l5b.Add(src_.data(), 4096);
  l5b.Add(src_.data() + 4096, 0);
  r5b.Add(dst_.data(), 4096);
  r5b.Add(dst_.data() + 4096, 0);
  expect_invalid(l5b, r5b, "zero length after a contiguous pair");
  DescList l5c, r5c;
  l5c.Add(src_.data(), 4096);
  l5c.Add(src_.data() + 4096, kSize - 2048);
  r5c.Add(dst_.data(), 4096);
  r5c.Add(dst_.data() + 4096, kSize - 2048);
  expect_invalid(l5c, r5c, "contiguous past the end of both regions");
  std::vector<uint8_t> unregistered(4096);
  DescList l6, r6;
  l6.Add(unregistered.data(), 4096);
  r6.Add(dst_.data(), 4096);
  expect_invalid(l6, r6, "unregistered local memory");
  EXPECT_EQ(initiator_->Post(Op::kWrite, l, r, "nobody").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(initiator_->stats().num_transfers, 0u);
}

// PostOptions::on_done: once per transfer, done or failed, and returned before Wait() or Check()
// can see the end; never for a Post that returns an error.
TEST_P(AgentTest, OnDoneRunsOnceAndReturnsBeforeTheEndIsSeen) {
  std::atomic<int> calls{0};
  std::atomic<bool> returned{false};
  PostOptions o;
  o.on_done = [&] {
    calls++;
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a slow callback
    returned = true;
  };
  DescList l, r;
  l.Add(src_.data(), 1 << 20);
  r.Add(dst_.data(), 1 << 20);
  auto h = initiator_->Post(Op::kWrite, l, r, "decode", std::nullopt, o);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(h->Wait().ok());
  EXPECT_TRUE(returned.load());  // fails if the end is visible before the callback returned
  EXPECT_EQ(calls.load(), 1);

  // A failure the target reports (stale metadata: its region is gone): called too.
  std::vector<uint8_t> victim(1 << 20, 0xAB);
  auto reg = target_->RegisterMemory(victim.data(), victim.size());
  ASSERT_TRUE(reg.ok());
  Reload();
  reg->Reset();
  returned = false;
  DescList rv;
  rv.Add(victim.data(), 1 << 20);
  auto failed = initiator_->Post(Op::kWrite, l, rv, "decode", std::nullopt, o);
  ASSERT_TRUE(failed.ok()) << failed.status().ToString();
  EXPECT_FALSE(failed->Wait().ok());
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(calls.load(), 2);

  // Refused by Post itself (outside our registrations): never called.
  DescList outside;
  outside.Add(victim.data(), 4096);
  DescList r4;
  r4.Add(dst_.data(), 4096);
  EXPECT_FALSE(initiator_->Post(Op::kWrite, outside, r4, "decode", std::nullopt, o).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(calls.load(), 2);
}

TEST_P(AgentTest, TargetRechecksItsOwnRegistrations) {
  // The initiator holds stale metadata: the target deregistered the region since.
  std::vector<uint8_t> victim(1 << 20, 0xAB);
  auto reg = target_->RegisterMemory(victim.data(), victim.size());
  ASSERT_TRUE(reg.ok());
  Reload();
  reg->Reset();  // deregistered; memory still allocated
  DescList l, r;
  l.Add(src_.data(), 1 << 20);
  r.Add(victim.data(), 1 << 20);
  auto h = initiator_->Post(Op::kWrite, l, r, "decode", "must not arrive");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(WaitEnd(*h), TransferState::kError);
  EXPECT_EQ(h->status().code(), StatusCode::kInvalidArgument) << h->status().ToString();
  for (uint8_t b : victim) ASSERT_EQ(b, 0xAB);
  EXPECT_TRUE(target_->GetNotifications().empty());
  auto h2 = initiator_->Post(Op::kRead, l, r, "decode");
  ASSERT_TRUE(h2.ok());
  EXPECT_EQ(WaitEnd(*h2), TransferState::kError);
  // The agent (and a tcp connection) stays usable.
  DescList l3, r3;
  l3.Add(src_.data(), 4096);
  r3.Add(dst_.data(), 4096);
  auto h3 = initiator_->Post(Op::kWrite, l3, r3, "decode");
  ASSERT_EQ(WaitEnd(*h3), TransferState::kDone) << h3->status().ToString();
  TransferStats s = initiator_->stats();
  EXPECT_EQ(s.num_transfers, 1u);
  EXPECT_EQ(s.num_errors, 2u);
}

TEST_P(AgentTest, RandomRoundTrips) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> back(kSize);
  auto back_reg = std::move(initiator_->RegisterMemory(back.data(), back.size()).value());
  for (int iter = 0; iter < 25; ++iter) {
    FillRandom(src_, 100 + iter);
    int n = 1 + static_cast<int>(rng() % 8);
    DescList l, r, back_l;
    uint64_t chunk = kSize / 8;
    for (int i = 0; i < n; ++i) {
      uint64_t len = 1 + rng() % (chunk - 1);
      uint64_t so = i * chunk + rng() % (chunk - len + 1);
      uint64_t dof = ((i + iter) % 8) * chunk + rng() % (chunk - len + 1);
      l.Add(src_.data() + so, len);
      r.Add(dst_.data() + dof, len);
      back_l.Add(back.data() + so, len);
    }
    auto w = initiator_->Post(Op::kWrite, l, r, "decode");
    ASSERT_TRUE(w.ok());
    ASSERT_EQ(WaitEnd(*w), TransferState::kDone) << w->status().ToString();
    auto rd = initiator_->Post(Op::kRead, back_l, r, "decode");
    ASSERT_TRUE(rd.ok());
    ASSERT_EQ(WaitEnd(*rd), TransferState::kDone) << rd->status().ToString();
    for (size_t i = 0; i < l.descs.size(); ++i) {
      const auto& d = l.descs[i];
      const uint8_t* a = reinterpret_cast<const uint8_t*>(d.addr);
      const uint8_t* b = reinterpret_cast<const uint8_t*>(back_l.descs[i].addr);
      ASSERT_EQ(Checksum(a, d.len), Checksum(b, d.len)) << "iter " << iter << " desc " << i;
    }
  }
  EXPECT_EQ(initiator_->stats().num_transfers, 50u);
}

TEST_P(AgentTest, ConcurrentPostsFromManyThreads) {
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        uint64_t block = t * 100 + i;
        auto [l, r] = Blocks({{block, block}});
        auto h = initiator_->Post(Op::kWrite, l, r, "decode");
        if (h.ok() && WaitEnd(*h) == TransferState::kDone) ok++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 80);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(std::memcmp(src_.data() + t * 100 * kBlock, dst_.data() + t * 100 * kBlock, 20 * kBlock), 0);
  }
}

TEST_P(AgentTest, DestroyingAnInFlightHandleWaitsForTheData) {
  std::vector<uint8_t> big_src(64 << 20), big_dst(64 << 20, 0);
  FillRandom(big_src, 3);
  auto rs = std::move(initiator_->RegisterMemory(big_src.data(), big_src.size()).value());
  auto rd = std::move(target_->RegisterMemory(big_dst.data(), big_dst.size()).value());
  Reload();
  {
    DescList l, r;
    l.Add(big_src.data(), big_src.size());
    r.Add(big_dst.data(), big_dst.size());
    auto h = initiator_->Post(Op::kWrite, l, r, "decode");
    ASSERT_TRUE(h.ok());
  }  // the handle goes away at once
  EXPECT_EQ(Checksum(big_src.data(), big_src.size()), Checksum(big_dst.data(), big_dst.size()));
}

TEST_P(AgentTest, InvalidatedPeerIsUnknown) {
  ASSERT_TRUE(initiator_->InvalidatePeer("decode").ok());
  auto [l, r] = Blocks({{0, 0}});
  EXPECT_EQ(initiator_->Post(Op::kWrite, l, r, "decode").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(initiator_->InvalidatePeer("decode").code(), StatusCode::kNotFound);
  Reload();
  auto h = initiator_->Post(Op::kWrite, l, r, "decode");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(WaitEnd(*h), TransferState::kDone);
}

INSTANTIATE_TEST_SUITE_P(Backends, AgentTest, ::testing::ValuesIn(TestedBackends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem::transfer
