// ModelRunner::CopyKvBlocks on the CPU runner (the KV host tier's copies, kvtier/offloader.h):
// blocks out to host memory and back into other blocks, byte for byte against the pool layout.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "model/model_runner.h"

namespace tandem {
namespace {

TEST(CpuKvBlockCopy, OutAndBackIntoOtherBlocksByteForByte) {
  auto runner = LoadCpuModelRunner(DefaultModelDir());
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  ModelRunner& r = **runner;
  ASSERT_TRUE(r.AllocateKVCache(8, 16).ok());
  const KVCacheLayout layout = r.kv_cache_layout();
  const size_t bb = layout.block_bytes, layers = layout.layer_base.size();
  ASSERT_GT(bb, 0u);
  ASSERT_GT(layers, 1u);
  auto block = [&](size_t l, int b) { return static_cast<std::byte*>(layout.layer_base[l]) + b * bb; };
  for (size_t l = 0; l < layers; ++l) {
    for (int b = 0; b < 8; ++b) std::memset(block(l, b), static_cast<int>((16 * l + b) & 0xff), bb);
  }
  std::vector<std::byte> slots(2 * layers * bb);
  const KvBlockCopy out[] = {{5, slots.data(), true}, {2, slots.data() + layers * bb, true}};
  ASSERT_TRUE(r.CopyKvBlocks(out).ok());
  for (size_t l = 0; l < layers; ++l) {
    EXPECT_EQ(std::memcmp(slots.data() + l * bb, block(l, 5), bb), 0) << l;
    EXPECT_EQ(std::memcmp(slots.data() + (layers + l) * bb, block(l, 2), bb), 0) << l;
  }
  const KvBlockCopy in[] = {{0, slots.data(), false}, {7, slots.data() + layers * bb, false}};
  ASSERT_TRUE(r.CopyKvBlocks(in).ok());
  ASSERT_TRUE(r.SyncKvCopies().ok());
  for (size_t l = 0; l < layers; ++l) {
    EXPECT_EQ(std::memcmp(block(l, 0), block(l, 5), bb), 0) << l;
    EXPECT_EQ(std::memcmp(block(l, 7), block(l, 2), bb), 0) << l;
    EXPECT_EQ(static_cast<int>(block(l, 1)[0]), static_cast<int>((16 * l + 1) & 0xff)) << "untouched";
  }
  const KvBlockCopy bad[] = {{8, slots.data(), true}};
  EXPECT_EQ(r.CopyKvBlocks(bad).code(), StatusCode::kInvalidArgument);
  const KvBlockCopy null_host[] = {{1, nullptr, true}};
  EXPECT_EQ(r.CopyKvBlocks(null_host).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
