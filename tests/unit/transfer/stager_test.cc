// Stager (transfer/staging.h) on the fake device: bytes in order across chunk boundaries, ranges
// gathered into chunks, device faults (the byte stream stays in step), the copies all synced.
#include <cstring>

#include "fake_device.h"
#include "transfer/staging.h"
#include "transfer_test_util.h"

namespace tandem::transfer {
namespace {

using testing::DeviceBuffer;
using testing::FakeDevice;
using testing::FillRandom;

class StagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = std::make_shared<FakeDevice>();
    a_ = dev_->Alloc(1, kSize);
    b_ = dev_->Alloc(2, kSize);
    pattern_.resize(kSize);
    FillRandom(pattern_, 3);
    std::memcpy(dev_->Alias(1, a_.addr(), kSize), pattern_.data(), kSize);
  }
  void TearDown() override { EXPECT_EQ(dev_->violations(), ""); }
  // Ranges of a and b: odd lengths, out of order, on two devices.
  std::vector<Descriptor> Ranges() const {
    return {{a_.addr() + 100, 5000, 1}, {a_.addr() + 70000, 3, 1}, {a_.addr(), 100, 1}, {a_.addr() + 9000, 40000, 1}};
  }

  static constexpr uint64_t kSize = 1 << 20;
  std::shared_ptr<FakeDevice> dev_;
  DeviceBuffer a_, b_;
  std::vector<uint8_t> pattern_;
};

TEST_F(StagerTest, SendHandsTheBytesOverInOrderInChunks) {
  Stager stager(*dev_, 4096);
  std::string out;
  std::vector<uint64_t> pieces;
  ASSERT_TRUE(stager
                  .Send(Ranges(),
                        [&](const void* p, uint64_t n) {
                          out.append(static_cast<const char*>(p), n);
                          pieces.push_back(n);
                          return Status::Ok();
                        })
                  .ok());
  std::string want;
  for (const Descriptor& d : Ranges()) {
    want.append(reinterpret_cast<const char*>(pattern_.data()) + (d.addr - a_.addr()), d.len);
  }
  EXPECT_EQ(out, want);
  ASSERT_FALSE(pieces.empty());
  for (size_t i = 0; i + 1 < pieces.size(); ++i) EXPECT_EQ(pieces[i], 4096u) << i;
  EXPECT_EQ(dev_->counts().to_host, want.size());
}

TEST_F(StagerTest, ReceiveLandsEveryByteBeforeItReturns) {
  Stager stager(*dev_, 4096);
  std::vector<Descriptor> ranges = {{b_.addr() + 7, 10000, 2}, {b_.addr() + 50000, 1, 2}, {b_.addr() + 20000, 8192, 2}};
  uint64_t fed = 0;
  dev_->set_copy_delay(std::chrono::milliseconds(2));  // landing late: Receive must still wait
  ASSERT_TRUE(stager
                  .Receive(ranges,
                           [&](void* p, uint64_t n) {
                             std::memcpy(p, pattern_.data() + fed, n);
                             fed += n;
                             return Status::Ok();
                           })
                  .ok());
  const uint8_t* b = dev_->Alias(2, b_.addr(), kSize);
  uint64_t off = 0;
  for (const Descriptor& d : ranges) {
    EXPECT_EQ(std::memcmp(b + (d.addr - b_.addr()), pattern_.data() + off, d.len), 0) << d.addr - b_.addr();
    off += d.len;
  }
  EXPECT_EQ(fed, off);
  EXPECT_EQ(dev_->counts().from_host, off);
}

TEST_F(StagerTest, DeviceFaultDrainsTheSourceThenFails) {
  Stager stager(*dev_, 4096);
  std::vector<Descriptor> ranges = {{b_.addr(), 64 << 10, 2}};
  dev_->set_fail_after_bytes(10000);
  uint64_t fed = 0;
  Status st = stager.Receive(ranges, [&](void* p, uint64_t n) {
    std::memset(p, 1, n);
    fed += n;
    return Status::Ok();
  });
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("injected"), std::string::npos) << st.ToString();
  EXPECT_EQ(fed, 64u << 10);  // every byte taken: a socket stays in step
  dev_->set_fail_after_bytes(10000);
  uint64_t sent = 0;
  st = stager.Send(ranges, [&](const void*, uint64_t n) {
    sent += n;
    return Status::Ok();
  });
  EXPECT_FALSE(st.ok());
  EXPECT_LT(sent, 64u << 10);
}

TEST_F(StagerTest, SinkAndSourceErrorsStopAtOnce) {
  Stager stager(*dev_, 4096);
  std::vector<Descriptor> ranges = {{a_.addr(), 64 << 10, 1}};
  int calls = 0;
  Status st = stager.Send(ranges, [&](const void*, uint64_t) {
    return ++calls == 3 ? Status(StatusCode::kInternal, "socket closed") : Status::Ok();
  });
  EXPECT_EQ(st.message(), "socket closed");
  EXPECT_EQ(calls, 3);
  calls = 0;
  st = stager.Receive(ranges, [&](void*, uint64_t) {
    return ++calls == 2 ? Status(StatusCode::kInternal, "reset") : Status::Ok();
  });
  EXPECT_EQ(st.message(), "reset");
  EXPECT_EQ(calls, 2);
}

TEST_F(StagerTest, AnAddressOutsideDeviceMemoryIsAnErrorNotACrash) {
  Stager stager(*dev_, 4096);
  std::vector<uint8_t> host(4096);
  std::vector<Descriptor> ranges = {{reinterpret_cast<uint64_t>(host.data()), 4096, 1}};
  Status st = stager.Send(ranges, [](const void*, uint64_t) { return Status::Ok(); });
  EXPECT_FALSE(st.ok());
  EXPECT_NE(dev_->violations(), "");
  dev_ = std::make_shared<FakeDevice>();  // TearDown checks a clean one
}

}  // namespace
}  // namespace tandem::transfer
