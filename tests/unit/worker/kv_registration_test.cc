// The KV pool's registration with the transfer agent: its memory kind from the layout, the
// start-up line naming the backend, a GPU pool refused without a copier, and the decode worker's
// pool kind read back from its agent metadata (what the prefill worker writes into).
#include <gtest/gtest.h>

#include <vector>

#include "transfer/agent.h"
#include "worker/prefill_handler.h"

namespace tandem::worker {
namespace {

std::unique_ptr<transfer::Agent> MakeAgent(const std::string& name, std::string override_backend = "") {
  transfer::AgentOptions o;
  o.name = name;
  o.backend_override = std::move(override_backend);
  auto a = transfer::Agent::Create(std::move(o));
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

struct Pool {
  std::vector<std::vector<uint8_t>> layers;
  KVCacheLayout layout;
  Pool(int num_layers, int device_id) : layers(num_layers, std::vector<uint8_t>(8 * 4096)) {
    for (auto& l : layers) layout.layer_base.push_back(l.data());
    layout.block_bytes = 4096;
    layout.num_blocks = 8;
    layout.device_id = device_id;
  }
};

TEST(KVRegistrationTest, HostPoolIsRegisteredAndTheBackendLineNamesTcp) {
  Pool pool(3, -1);
  auto agent = MakeAgent("decode-0");
  EXPECT_EQ(KVDeviceCopier(pool.layout), nullptr);
  auto regs = RegisterKVCache(*agent, pool.layout);
  ASSERT_TRUE(regs.ok()) << regs.status().ToString();
  EXPECT_EQ(regs->size(), 3u);
  EXPECT_EQ(KVTransferBackendLine(*agent, pool.layout).value(), "KV transfer backend: tcp (host memory)");

  const std::string md = agent->ExportMetadata();
  const uint64_t layer1 = reinterpret_cast<uint64_t>(pool.layout.layer_base[1]);
  auto kind = KVPoolMemoryOf(md, layer1 + 4096);
  ASSERT_TRUE(kind.ok()) << kind.status().ToString();
  EXPECT_EQ(kind->first, transfer::MemoryKind::kHost);
  EXPECT_EQ(kind->second, 0);
  EXPECT_EQ(KVPoolMemoryOf(md, layer1 + 8 * 4096 + (1 << 30)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KVPoolMemoryOf("not cbor", layer1).status().code(), StatusCode::kDataLoss);
}

TEST(KVRegistrationTest, GpuPoolWithoutACopierIsRefusedNamingTheDevice) {
  Pool pool(2, 1);
#ifdef TANDEM_HAVE_CUDA_COPIER
  EXPECT_NE(KVDeviceCopier(pool.layout), nullptr);
#else
  EXPECT_EQ(KVDeviceCopier(pool.layout), nullptr);  // built without CUDA
#endif
  auto agent = MakeAgent("prefill-0");  // no copier given
  auto regs = RegisterKVCache(*agent, pool.layout);
  ASSERT_FALSE(regs.ok());
  EXPECT_EQ(regs.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(regs.status().message().find("cuda:1"), std::string::npos) << regs.status().ToString();
}

TEST(KVRegistrationTest, AnOverrideThatReachesNoOtherProcessIsSaid) {
  Pool pool(1, -1);
  auto agent = MakeAgent("decode-1", "local");
  auto regs = RegisterKVCache(*agent, pool.layout);  // a host pool: a warning, not an error
  ASSERT_TRUE(regs.ok()) << regs.status().ToString();
  EXPECT_EQ(KVTransferBackendLine(*agent, pool.layout).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tandem::worker
