// A tcp transfer that reports done has let go of the caller's memory: the caller may free its
// buffers at once. The target's answer can arrive while the sending thread is still inside its
// send of the last bytes; the transfer completes only once that thread is out (tcp_client.h,
// Stripe::answered). The plain build checks the data; under TSan (scripts/sanitize.sh tsan) a
// completion that raced the sender is a report on the buffers freed here.
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "transfer/agent.h"
#include "transfer_test_util.h"

namespace tandem::transfer {
namespace {

using testing::FillRandom;
using testing::MakeAgent;
using testing::WaitEnd;

TEST(TcpDoneTest, TheCallerMayFreeItsBuffersOnceATransferIsDone) {
  // Two connections and a small stripe size: large transfers go out as two stripes.
  BackendParams params = {{"num_connections", "2"}, {"stripe_min_bytes", "65536"}};
  auto initiator = MakeAgent("prefill", {"tcp"}, params);
  auto target = MakeAgent("decode", {"tcp"}, params);
  ASSERT_TRUE(initiator && target);
  constexpr uint64_t kMax = 8 << 20;
  std::vector<uint8_t> remote(kMax, 0);
  auto remote_reg = target->RegisterMemory(remote.data(), remote.size());
  ASSERT_TRUE(remote_reg.ok());
  ASSERT_TRUE(initiator->LoadPeerMetadata(target->ExportMetadata()).ok());
  int round = 0;
  // The answer races the sender's last send() the more, the longer that send is: large sizes, repeated.
  for (uint64_t size : {uint64_t{1}, uint64_t{4096}, uint64_t{65536}, uint64_t{300000}, kMax, kMax, kMax, kMax}) {
    for (bool notify : {false, true}) {
      ++round;
      // WRITE from a fresh buffer, freed as soon as the write is done.
      auto src = std::make_unique<std::vector<uint8_t>>(size);
      FillRandom(*src, round);
      const std::vector<uint8_t> expected = *src;
      {
        auto reg = initiator->RegisterMemory(src->data(), size);
        ASSERT_TRUE(reg.ok());
        DescList l, r;
        l.Add(src->data(), size);
        r.Add(remote.data(), size);
        std::optional<std::string> note;
        if (notify) note = "round " + std::to_string(round);
        auto h = initiator->Post(Op::kWrite, l, r, "decode", note);
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        ASSERT_EQ(WaitEnd(*h), TransferState::kDone) << h->status().ToString();
      }
      src.reset();
      ASSERT_EQ(std::memcmp(remote.data(), expected.data(), size), 0) << "size " << size;
      // READ into a fresh buffer, freed as soon as the read is done.
      auto dst = std::make_unique<std::vector<uint8_t>>(size, 0);
      {
        auto reg = initiator->RegisterMemory(dst->data(), size);
        ASSERT_TRUE(reg.ok());
        DescList l, r;
        l.Add(dst->data(), size);
        r.Add(remote.data(), size);
        auto h = initiator->Post(Op::kRead, l, r, "decode");
        ASSERT_TRUE(h.ok()) << h.status().ToString();
        ASSERT_EQ(WaitEnd(*h), TransferState::kDone) << h->status().ToString();
      }
      ASSERT_EQ(*dst, expected) << "size " << size;
      dst.reset();
    }
  }
  EXPECT_EQ(target->GetNotifications().size(), 8u);
}

}  // namespace
}  // namespace tandem::transfer
