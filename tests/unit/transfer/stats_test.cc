// Accounting, the decode worker's log line, /metrics counters, metadata encoding, coalescing.
#include <gtest/gtest.h>

#include "transfer/coalesce.h"
#include "transfer/metadata.h"
#include "transfer/transfer_stats.h"
#include "transfer_test_util.h"

namespace tandem::transfer {
namespace {

TEST(TransferStatsTest, LogLine) {
  TransferStats s;
  EXPECT_EQ(FormatTransferMetricsLine(s),
            "KV Transfer metrics: Num successful transfers=0, Avg xfer time (ms)=0.000, Avg MB per transfer=0.000, "
            "Throughput (MB/s)=0.0");
  s.num_transfers = 4;
  s.bytes = 4ull << 20;  // 4 MiB
  s.seconds = 0.008;     // 2 ms each
  EXPECT_EQ(FormatTransferMetricsLine(s),
            "KV Transfer metrics: Num successful transfers=4, Avg xfer time (ms)=2.000, Avg MB per transfer=1.000, "
            "Throughput (MB/s)=500.0");
}

TEST(TransferStatsTest, MetricsCountersFollowTheTotals) {
  metrics::Registry registry;
  TransferStats s;
  s.num_transfers = 3;
  s.bytes = 3000;
  s.seconds = 0.5;
  s.num_errors = 1;
  UpdateTransferMetrics(s, registry, {{"worker", "decode-0"}});
  s.num_transfers = 5;
  s.bytes = 5000;
  UpdateTransferMetrics(s, registry, {{"worker", "decode-0"}});
  std::string text = registry.RenderText();
  EXPECT_NE(text.find("# TYPE tandem_kv_transfers_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem_kv_transfers_total{worker=\"decode-0\"} 5"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem_kv_transfer_bytes_total{worker=\"decode-0\"} 5000"), std::string::npos);
  EXPECT_NE(text.find("tandem_kv_transfer_seconds_total{worker=\"decode-0\"} 0.5"), std::string::npos);
  EXPECT_NE(text.find("tandem_kv_transfer_errors_total{worker=\"decode-0\"} 1"), std::string::npos);
}

TEST(TransferStatsTest, AgentCountsTransfersAndLogsThem) {
  auto a = testing::MakeAgent("a");
  auto b = testing::MakeAgent("b");
  std::vector<uint8_t> src(1 << 20, 1), dst(1 << 20, 0);
  auto r1 = std::move(a->RegisterMemory(src.data(), src.size()).value());
  auto r2 = std::move(b->RegisterMemory(dst.data(), dst.size()).value());
  ASSERT_TRUE(a->LoadPeerMetadata(b->ExportMetadata()).ok());
  for (int i = 0; i < 4; ++i) {
    DescList l, r;
    l.Add(src.data(), 1 << 18);
    r.Add(dst.data() + (i << 18), 1 << 18);
    auto h = a->Post(Op::kWrite, l, r, "b");
    ASSERT_TRUE(h.ok());
    ASSERT_EQ(testing::WaitEnd(*h), TransferState::kDone);
  }
  TransferStats s = a->stats();
  EXPECT_EQ(s.num_transfers, 4u);
  EXPECT_EQ(s.bytes, 1u << 20);
  EXPECT_GT(s.seconds, 0.0);
  EXPECT_EQ(s.num_errors, 0u);
  std::string line = FormatTransferMetricsLine(s);
  EXPECT_EQ(line.rfind("KV Transfer metrics: Num successful transfers=4, Avg xfer time (ms)=", 0), 0u) << line;
  EXPECT_NE(line.find("Avg MB per transfer=0.250, Throughput (MB/s)="), std::string::npos) << line;
  EXPECT_EQ(s.Since(s).num_transfers, 0u);
}

TEST(TransferMetadataTest, RoundTripAndGarbage) {
  AgentMetadata md;
  md.name = "w";
  md.instance_id = "i";
  md.process_id = ThisProcessId();
  md.backends["tcp"] = "127.0.0.1:5555";
  md.regions.push_back({0x1000, 4096, MemoryKind::kDevice, 1, {{"ucx", std::string("\0\1rkey", 6)}}});
  auto back = DecodeMetadata(EncodeMetadata(md));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->name, "w");
  EXPECT_EQ(back->backends.at("tcp"), "127.0.0.1:5555");
  ASSERT_EQ(back->regions.size(), 1u);
  EXPECT_EQ(back->regions[0].kind, MemoryKind::kDevice);
  EXPECT_EQ(back->regions[0].device_id, 1);
  EXPECT_EQ(back->regions[0].backend_info.at("ucx"), std::string("\0\1rkey", 6));
  EXPECT_EQ(LocalityOf(*back), Locality::kSameProcess);
  EXPECT_EQ(DecodeMetadata("not cbor at all").status().code(), StatusCode::kDataLoss);
  auto agent = testing::MakeAgent("x");
  EXPECT_FALSE(agent->LoadPeerMetadata("garbage").ok());
}

TEST(TransferCoalesceTest, MergesOnlyWithinOneRegionOnBothSides) {
  std::vector<RegionInfo> local = {{1, 0x10000, 0x1000, MemoryKind::kHost, 0},
                                   {2, 0x11000, 0x1000, MemoryKind::kHost, 0}};  // adjacent regions
  std::vector<RegionInfo> remote = {{1, 0x80000, 0x4000, MemoryKind::kHost, 0}};
  DescList l, r;
  l.Add(uint64_t{0x10000}, 0x800);
  r.Add(uint64_t{0x80000}, 0x800);
  l.Add(uint64_t{0x10800}, 0x800);
  r.Add(uint64_t{0x80800}, 0x800);
  l.Add(uint64_t{0x11000}, 0x800);  // contiguous, but in the next local region
  r.Add(uint64_t{0x81000}, 0x800);
  auto segs = Coalesce(l, r, local, remote);
  ASSERT_TRUE(segs.ok());
  ASSERT_EQ(segs->size(), 2u);
  EXPECT_EQ((*segs)[0].len, 0x1000u);
  EXPECT_EQ((*segs)[1].local_addr, 0x11000u);
  DescList bad_kind = r;
  bad_kind.kind = MemoryKind::kDevice;
  EXPECT_EQ(Coalesce(l, bad_kind, local, remote).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem::transfer
