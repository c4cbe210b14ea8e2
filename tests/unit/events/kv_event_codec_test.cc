// events/kv_event_codec.h: what a router decodes from any worker's payload.
#include "events/kv_event_codec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tandem::runtime {
namespace {

constexpr const char* kLoad = R"("load":{"num_active_blocks":0,"num_total_blocks":1,"num_waiting":0,"num_running":0})";

TEST(KvEventCodec, BatchRoundTrip) {
  KvEventBatch batch;
  batch.events.push_back({1, KvStoredEvent{0, {11, 12}}});
  batch.events.push_back({2, KvRemovedEvent{{12}}});
  batch.events.push_back({3, KvClearedEvent{}});
  batch.load = {2, 64, 1, 1};
  auto decoded = DecodeKvEventBatch(EncodeKvEventBatch(batch));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->events, batch.events);
  EXPECT_EQ(decoded->load, batch.load);
}

// Found by tests/fuzz/kv_event_codec_fuzz: "removed" (or "stored") that is not an object made
// nlohmann's value() throw out of DecodeKvEventBatch, ending the subscriber's process.
TEST(KvEventCodec, EventKindThatIsNotAnObjectIsDataLoss) {
  for (const char* kind : {"removed", "stored"}) {
    for (const char* value : {"5", "\"x\"", "[1,2]", "null", "true"}) {
      std::string payload = std::string(R"({"events":[{"event_id":1,"data":{")") + kind + "\":" + value + "}}]," + kLoad + "}";
      Result<KvEventBatch> batch{KvEventBatch{}};
      ASSERT_NO_THROW(batch = DecodeKvEventBatch(payload)) << payload;
      ASSERT_FALSE(batch.ok()) << payload;
      EXPECT_EQ(batch.status().code(), StatusCode::kDataLoss) << payload;
    }
  }
}

// Every committed fuzz input (seeds and the inputs of past findings) decodes or fails cleanly.
TEST(KvEventCodec, FuzzCorpusDecodesWithoutThrowing) {
  const std::filesystem::path dir = std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/fuzz/corpus/kv_event_codec";
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_NO_THROW((void)DecodeKvEventBatch(ss.str())) << entry.path();
    EXPECT_NO_THROW((void)DecodeKvCacheSnapshot(ss.str())) << entry.path();
    ++n;
  }
  EXPECT_GE(n, 4);
}

}  // namespace
}  // namespace tandem::runtime
