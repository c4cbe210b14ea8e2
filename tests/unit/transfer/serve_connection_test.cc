// tcp::ServeConnection and ipc::ServeControlConnection called directly on one end of a socketpair
// in the test's thread (as the fuzz targets call them), and tcp::RecvArray.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "transfer/backend.h"
#include "transfer/cuda_ipc_control.h"
#include "transfer/region_table.h"
#include "transfer/tcp_serve.h"
#include "transfer/tcp_wire.h"

namespace tandem::transfer {
namespace {

// One host region (a buffer of this test) and one device region that is never touched.
class TestHost final : public BackendHost {
 public:
  TestHost() : table_(std::make_shared<RegionTable>()), memory_(4096, 0) {
    EXPECT_TRUE(table_->Add(host_addr(), memory_.size(), MemoryKind::kHost, 0).ok());
    EXPECT_TRUE(table_->Add(kDeviceAddr, 1 << 20, MemoryKind::kDevice, 0).ok());
  }
  const std::string& agent_name() const override { return name_; }
  const std::string& instance_id() const override { return instance_; }
  Result<RegionPin> PinRegistered(MemoryKind kind, std::span<const Descriptor> ranges) override {
    return table_->Pin(kind, ranges);
  }
  void DeliverNotification(Notification n) override { notes.push_back(std::move(n)); }
  uint64_t host_addr() const { return reinterpret_cast<uint64_t>(memory_.data()); }
  std::vector<uint8_t>& memory() { return memory_; }

  static constexpr uint64_t kDeviceAddr = 0x7f0000000000;
  std::vector<Notification> notes;

 private:
  const std::string name_ = "target";
  const std::string instance_ = "instance-1";
  std::shared_ptr<RegionTable> table_;
  std::vector<uint8_t> memory_;
};

// `input` written into one end of a socketpair, its write side shut down; `serve` runs on the
// other end in this thread; returns what it answered.
template <typename Serve>
std::string ServeBytes(const std::string& input, Serve&& serve) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  EXPECT_EQ(::send(sv[1], input.data(), input.size(), MSG_NOSIGNAL), static_cast<ssize_t>(input.size()));
  ::shutdown(sv[1], SHUT_WR);
  fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
  serve(sv[0]);
  ::close(sv[0]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(sv[1]);
  return out;
}

template <typename T>
void Append(std::string& s, const T& v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

std::string TcpHello(const std::string& instance) {
  const std::string aux = "initiator\n" + instance;
  tcp::FrameHeader h;
  h.type = tcp::FrameType::kHello;
  h.aux_len = static_cast<uint32_t>(aux.size());
  std::string s;
  Append(s, h);
  return s + aux;
}

tcp::FrameHeader FrameAt(const std::string& answer, size_t offset) {
  tcp::FrameHeader h;
  EXPECT_GE(answer.size(), offset + sizeof(h));
  if (answer.size() >= offset + sizeof(h)) std::memcpy(&h, answer.data() + offset, sizeof(h));
  return h;
}

const std::atomic<bool> kNotStopping{false};
const tcp::ServeOptions kTcpOptions;

TEST(TcpServeConnection, HelloWriteWithNotificationThenReadInOneThread) {
  TestHost host;
  std::string in = TcpHello("instance-1");
  const std::string payload = "0123456789abcdef";
  const std::string note = "layer-0 done";
  tcp::FrameHeader w;
  w.type = tcp::FrameType::kWrite;
  w.flags = tcp::kHasNotification;
  w.xfer_id = 7;
  w.num_segments = 1;
  w.aux_len = static_cast<uint32_t>(note.size());
  w.payload_len = payload.size();
  Append(in, w);
  Append(in, tcp::WireSegment{host.host_addr() + 100, payload.size(), 0, 0});
  in += note + payload;
  tcp::FrameHeader r;
  r.type = tcp::FrameType::kRead;
  r.xfer_id = 8;
  r.num_segments = 1;
  Append(in, r);
  Append(in, tcp::WireSegment{host.host_addr() + 104, 4, 0, 0});

  const std::string out = ServeBytes(in, [&](int fd) { tcp::ServeConnection(fd, host, kTcpOptions, kNotStopping); });
  ASSERT_EQ(out.size(), 3 * sizeof(tcp::FrameHeader) + 4);
  EXPECT_EQ(FrameAt(out, 0).type, tcp::FrameType::kHelloOk);
  EXPECT_EQ(FrameAt(out, 40).type, tcp::FrameType::kAck);
  EXPECT_EQ(FrameAt(out, 40).xfer_id, 7u);
  EXPECT_EQ(FrameAt(out, 80).type, tcp::FrameType::kReadData);
  EXPECT_EQ(FrameAt(out, 80).payload_len, 4u);
  EXPECT_EQ(out.substr(120), "4567");
  EXPECT_EQ(std::memcmp(host.memory().data() + 100, payload.data(), payload.size()), 0);
  ASSERT_EQ(host.notes.size(), 1u);
  EXPECT_EQ(host.notes[0].peer, "initiator");
  EXPECT_EQ(host.notes[0].message, note);
}

TEST(TcpServeConnection, AnotherInstanceIsRefusedWithItsName) {
  TestHost host;
  const std::string out =
      ServeBytes(TcpHello("instance-2"), [&](int fd) { tcp::ServeConnection(fd, host, kTcpOptions, kNotStopping); });
  ASSERT_GE(out.size(), sizeof(tcp::FrameHeader));
  EXPECT_EQ(FrameAt(out, 0).type, tcp::FrameType::kError);
  EXPECT_EQ(FrameAt(out, 0).status_code, static_cast<uint32_t>(StatusCode::kFailedPrecondition));
  EXPECT_NE(out.find("instance-1"), std::string::npos) << out.substr(40);
}

TEST(TcpServeConnection, WriteOutsideTheRegistrationIsAnsweredAndItsPayloadDropped) {
  TestHost host;
  std::string in = TcpHello("instance-1");
  tcp::FrameHeader w;
  w.type = tcp::FrameType::kWrite;
  w.xfer_id = 3;
  w.num_segments = 1;
  w.payload_len = 8;
  Append(in, w);
  Append(in, tcp::WireSegment{host.host_addr() + 4090, 8, 0, 0});
  in += "ABCDEFGH";
  const std::string out = ServeBytes(in, [&](int fd) { tcp::ServeConnection(fd, host, kTcpOptions, kNotStopping); });
  ASSERT_GE(out.size(), 2 * sizeof(tcp::FrameHeader));
  EXPECT_EQ(FrameAt(out, 40).type, tcp::FrameType::kError);
  EXPECT_EQ(FrameAt(out, 40).xfer_id, 3u);
  EXPECT_EQ(host.memory()[4090], 0);
}

// A header that claims the most segments and aux allowed, then the end of the stream: the
// connection ends (no answer) without waiting for them.
TEST(TcpServeConnection, ClaimedSegmentsThatNeverComeEndTheConnection) {
  TestHost host;
  std::string in = TcpHello("instance-1");
  tcp::FrameHeader w;
  w.type = tcp::FrameType::kWrite;
  w.num_segments = tcp::kMaxSegments;
  w.aux_len = tcp::kMaxAux;
  Append(in, w);
  Append(in, tcp::WireSegment{host.host_addr(), 8, 0, 0});
  const std::string out = ServeBytes(in, [&](int fd) { tcp::ServeConnection(fd, host, kTcpOptions, kNotStopping); });
  EXPECT_EQ(out.size(), sizeof(tcp::FrameHeader));  // the kHelloOk only
}

std::string IpcMsg(ipc::MsgType type, uint64_t id, uint16_t flags, const std::vector<tcp::WireSegment>& ranges,
                   const std::string& aux) {
  ipc::MsgHeader h;
  h.type = type;
  h.xfer_id = id;
  h.flags = flags;
  h.num_ranges = static_cast<uint32_t>(ranges.size());
  h.aux_len = static_cast<uint32_t>(aux.size());
  std::string s;
  Append(s, h);
  for (const auto& r : ranges) Append(s, r);  // WireSegment has the WireRange layout
  return s + aux;
}

ipc::MsgHeader IpcAt(const std::string& answer, size_t offset) {
  ipc::MsgHeader h;
  EXPECT_GE(answer.size(), offset + sizeof(h));
  if (answer.size() >= offset + sizeof(h)) std::memcpy(&h, answer.data() + offset, sizeof(h));
  return h;
}

TEST(ServeControlConnection, HelloBeginsAndEndWithNotificationInOneThread) {
  TestHost host;
  std::string in = IpcMsg(ipc::MsgType::kHello, 0, 0, {}, "initiator\ninstance-1");
  in += IpcMsg(ipc::MsgType::kBegin, 5, 0, {{TestHost::kDeviceAddr, 4096, 0, 0}}, "");
  in += IpcMsg(ipc::MsgType::kBegin, 6, 0, {{TestHost::kDeviceAddr + (1 << 20), 4096, 0, 0}}, "");
  in += IpcMsg(ipc::MsgType::kEnd, 5, ipc::kSuccess | ipc::kHasNotification, {}, "kv ready");
  const std::string out = ServeBytes(in, [&](int fd) { ipc::ServeControlConnection(fd, host, kNotStopping); });
  ASSERT_GE(out.size(), 3 * sizeof(ipc::MsgHeader));
  EXPECT_EQ(IpcAt(out, 0).type, ipc::MsgType::kOk);
  EXPECT_EQ(IpcAt(out, 32).type, ipc::MsgType::kOk);
  EXPECT_EQ(IpcAt(out, 32).xfer_id, 5u);
  EXPECT_EQ(IpcAt(out, 64).type, ipc::MsgType::kError);  // outside the device region
  EXPECT_EQ(IpcAt(out, 64).xfer_id, 6u);
  EXPECT_EQ(IpcAt(out, 64).status_code, static_cast<uint32_t>(StatusCode::kInvalidArgument));
  ASSERT_EQ(host.notes.size(), 1u);
  EXPECT_EQ(host.notes[0].message, "kv ready");
}

TEST(ServeControlConnection, ClaimedRangesThatNeverComeEndTheConnectionBeforeTheHello) {
  TestHost host;
  ipc::MsgHeader h;
  h.type = ipc::MsgType::kHello;
  h.num_ranges = ipc::kMaxRanges;
  h.aux_len = ipc::kMaxAux;
  std::string in;
  Append(in, h);
  const std::string out = ServeBytes(in, [&](int fd) { ipc::ServeControlConnection(fd, host, kNotStopping); });
  EXPECT_TRUE(out.empty());
}

tcp::Tick NoWait() {
  return [](int) { return Err(StatusCode::kInternal, "would wait"); };
}

TEST(RecvArray, ReadsACountSpanningSeveralStepsWhileThePeerSends) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const size_t count = 3 * tcp::kRecvStepBytes / sizeof(tcp::WireSegment) + 5;
  std::vector<tcp::WireSegment> sent(count);
  for (size_t i = 0; i < count; ++i) sent[i] = {i, 2 * i, static_cast<int32_t>(i % 7), 0};
  std::thread peer([&] {
    EXPECT_TRUE(tcp::SendAll(sv[1], sent.data(), sent.size() * sizeof(sent[0]), [](int) { return Status::Ok(); }).ok());
  });
  std::vector<tcp::WireSegment> got{{1, 1, 1, 1}};  // replaced
  Status st = tcp::RecvArray(sv[0], &got, count, [](int) { return Status::Ok(); });
  peer.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(got.size(), count);
  EXPECT_EQ(std::memcmp(got.data(), sent.data(), count * sizeof(sent[0])), 0);
  std::string empty = "old";
  EXPECT_TRUE(tcp::RecvArray(sv[0], &empty, 0, NoWait()).ok());
  EXPECT_TRUE(empty.empty());
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(RecvArray, AClaimedCountCostsMemoryOnlyAsFarAsTheBytesCame) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ASSERT_EQ(::send(sv[1], "abc", 3, MSG_NOSIGNAL), 3);
  ::shutdown(sv[1], SHUT_WR);
  std::string aux;
  Status st = tcp::RecvArray(sv[0], &aux, tcp::kMaxAux, NoWait());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("connection closed"), std::string::npos) << st.ToString();
  EXPECT_LE(aux.capacity(), 2 * tcp::kRecvStepBytes);
  EXPECT_EQ(aux.substr(0, 3), "abc");
  ::close(sv[0]);
  ::close(sv[1]);
}

}  // namespace
}  // namespace tandem::transfer
