// The RMA backends' control protocol (fabric_control.h) and their metadata blobs: encoding round
// trips, refusals of other versions, the bounds a target pins, and peers whose ucx / libfabric
// blob has another format.
#include <cstring>

#include "transfer/fabric_control.h"
#include "transfer_test_util.h"

namespace tandem::transfer {
namespace {

using rma::ControlMessage;
using rma::ControlType;

TEST(FabricControlTest, RoundTrip) {
  ControlMessage m;
  m.type = ControlType::kBegin;
  m.flags = rma::kPush;
  m.xfer_id = 42;
  m.status = Status(StatusCode::kInvalidArgument, "outside");
  m.initiator = "prefill-0";
  m.initiator_instance = "abc";
  m.reply_address = std::string("\0\1\2", 3);
  m.target_instance = "def";
  m.op = Op::kRead;
  m.timeout_ms = 1234;
  m.notification = "req-7";
  m.bounds = {{0x1000, 4096, 0}, {0x9000, 64, 0}};
  m.push = {{0x1000, 0x7000, 4096, 1}};
  m.keys = {"k0", "k1"};
  auto d = rma::DecodeControl(rma::EncodeControl(m));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->type, ControlType::kBegin);
  EXPECT_EQ(d->flags, rma::kPush);
  EXPECT_EQ(d->xfer_id, 42u);
  EXPECT_EQ(d->status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(d->status.message(), "outside");
  EXPECT_EQ(d->reply_address, m.reply_address);
  EXPECT_EQ(d->op, Op::kRead);
  EXPECT_EQ(d->timeout_ms, 1234u);
  EXPECT_EQ(d->notification.value_or(""), "req-7");
  ASSERT_EQ(d->bounds.size(), 2u);
  EXPECT_EQ(d->bounds[1].addr, 0x9000u);
  ASSERT_EQ(d->push.size(), 1u);
  EXPECT_EQ(d->push[0].initiator_addr, 0x7000u);
  EXPECT_EQ(d->keys, m.keys);

  ControlMessage plain;  // no notification, OK status
  plain.type = ControlType::kAck;
  auto p = rma::DecodeControl(rma::EncodeControl(plain));
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->status.ok());
  EXPECT_FALSE(p->notification.has_value());
}

TEST(FabricControlTest, RefusesForeignTruncatedAndOtherVersions) {
  ControlMessage m;
  m.type = ControlType::kGrant;
  std::string bytes = rma::EncodeControl(m);
  EXPECT_EQ(rma::DecodeControl("nonsense").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(rma::DecodeControl(bytes.substr(0, bytes.size() - 1)).status().code(), StatusCode::kDataLoss);
  std::string v2 = bytes;
  v2[4] = static_cast<char>(rma::kControlVersion + 1);
  auto d = rma::DecodeControl(v2);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("version"), std::string::npos);
  m.push = {{1, 2, 3, 5}};  // key index past the keys
  m.keys = {"only"};
  EXPECT_EQ(rma::DecodeControl(rma::EncodeControl(m)).status().code(), StatusCode::kDataLoss);
}

TEST(FabricControlTest, BoundsCoverTheSegmentsPerRegion) {
  std::vector<rma::RegionSpan> regions = {{0x10000, 0x1000}, {0x40000, 0x10000}};
  std::vector<Segment> segs = {{0, 0x40100, 0x100, 0, 0}, {0, 0x10000, 0x10, 0, 0}, {0, 0x4f000, 0x1000, 0, 0}};
  auto b = rma::BoundsOf(segs, regions);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->size(), 2u);
  EXPECT_EQ((*b)[0].addr, 0x10000u);
  EXPECT_EQ((*b)[0].len, 0x10u);
  EXPECT_EQ((*b)[1].addr, 0x40100u);
  EXPECT_EQ((*b)[1].len, 0x50000u - 0x40100u);
  segs.push_back({0, 0x4f800, 0x1000, 0, 0});  // runs past the region's end
  EXPECT_EQ(rma::BoundsOf(segs, regions).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rma::FindSpan(regions, 0x40000, 0x10000), 1);
  EXPECT_EQ(rma::FindSpan(regions, 0x30000, 1), -1);
}

std::vector<std::string> RmaBackends() {
  std::vector<std::string> v;
#ifdef TANDEM_HAVE_UCX
  v.push_back("ucx");
#endif
#ifdef TANDEM_HAVE_LIBFABRIC
  v.push_back("libfabric");
#endif
  return v;
}

class RmaMetadataTest : public ::testing::TestWithParam<std::string> {};

// The backends' blobs are versioned ("ucx1", "fi1"): a peer advertising another format is loaded
// without that backend, and a transfer forced onto it is refused.
TEST_P(RmaMetadataTest, PeerWithAnotherBlobVersionIsNotReachedByThatBackend) {
  AgentOptions probe;
  probe.name = "probe";
  probe.backends = {GetParam()};
  auto usable = Agent::Create(probe);
  if (!usable.ok() && usable.status().code() == StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << GetParam() << " backend unusable here: " << usable.status().ToString();
  }
  auto target = testing::MakeAgent("decode", {"tcp", GetParam()});
  auto initiator = testing::MakeAgent("prefill", {"tcp", GetParam()});
  ASSERT_TRUE(target && initiator);
  std::vector<uint8_t> buf(1 << 16);
  auto reg = std::move(target->RegisterMemory(buf.data(), buf.size()).value());
  auto md = DecodeMetadata(target->ExportMetadata());
  ASSERT_TRUE(md.ok());
  ASSERT_EQ(md->regions.size(), 1u);
  EXPECT_TRUE(md->regions[0].backend_info.count(GetParam()));  // the region's key
  std::string& info = md->backends.at(GetParam());
  info[0] = 'X';  // another version
  ASSERT_TRUE(initiator->LoadPeerMetadata(EncodeMetadata(*md)).ok());
  EXPECT_EQ(initiator->BackendFor("decode").value(), "tcp");
  std::vector<uint8_t> src(4096);
  auto rs = std::move(initiator->RegisterMemory(src.data(), src.size()).value());
  DescList l, r;
  l.Add(src.data(), 4096);
  r.Add(buf.data(), 4096);
  PostOptions forced;
  forced.backend = GetParam();
  EXPECT_EQ(initiator->Post(Op::kWrite, l, r, "decode", std::nullopt, forced).status().code(),
            StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Backends, RmaMetadataTest, ::testing::ValuesIn(RmaBackends()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(RmaMetadataTest);

}  // namespace
}  // namespace tandem::transfer
