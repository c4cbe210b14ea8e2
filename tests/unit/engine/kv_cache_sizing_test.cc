// The KV pool's size (kv_cache_sizing.h): explicit sizes, the host default, and a device runner's
// free memory after a profile run at the largest step (a fake device whose "scratch" grows with
// the steps it has seen).
#include "engine/kv_cache_sizing.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "fake_model_runner.h"

namespace tandem {
namespace {

using testing::FakeModelRunner;

constexpr size_t kMiB = 1u << 20;
constexpr size_t kGiB = 1ull << 30;

// A device of `total` bytes: weights, plus scratch of 1 MiB per token and 64 KiB per logits row
// of the largest step seen, plus the KV pool; `other` bytes used by other processes.
class FakeDeviceRunner : public FakeModelRunner {
 public:
  FakeDeviceRunner(size_t total, size_t weights, size_t other = 0)
      : FakeModelRunner(512, 4096), total_(total), weights_(weights), other_(other) {}

  size_t KVBlockBytes(int block_size) const override { return kMiB * block_size; }
  Status AllocateKVCache(int num_blocks, int block_size) override {
    kv_bytes_ = static_cast<size_t>(num_blocks) * KVBlockBytes(block_size);
    block_size_ = block_size;
    allocated.push_back(num_blocks);
    if (num_blocks > 4096) return Status::Ok();  // keep the fake's slots small
    return FakeModelRunner::AllocateKVCache(num_blocks, block_size);
  }
  // The profile steps point every block table at block 0 with positions past what the fake's KV
  // chain holds: record them, return rows of zeros.
  Status Execute(const ForwardBatch& batch, ForwardOutput* out) override {
    int tokens = 0, rows = 0, argmax = 0;
    for (const SequenceSlice& s : batch.seqs) {
      tokens += static_cast<int>(s.token_ids.size());
      rows += s.logits != SequenceSlice::Logits::kNone ? 1 : 0;
      argmax += s.logits == SequenceSlice::Logits::kArgmax ? 1 : 0;
      max_end = std::max(max_end, s.start_pos + static_cast<int>(s.token_ids.size()));
      EXPECT_GE(s.block_table.size() * block_size_, s.start_pos + s.token_ids.size());
    }
    profile_tokens.push_back(tokens);
    profile_seqs.push_back(static_cast<int>(batch.seqs.size()));
    profile_argmax.push_back(argmax);
    scratch_ = std::max(scratch_, tokens * kMiB + rows * 64 * 1024);
    out->logits.assign(static_cast<size_t>(rows - argmax) * config().vocab_size, 0.0f);
    out->samples.assign(argmax, ArgmaxSample{});
    return Status::Ok();
  }
  Result<DeviceMemoryInfo> GetDeviceMemoryInfo() override {
    DeviceMemoryInfo m;
    m.total_bytes = total_;
    m.used_bytes = weights_ + scratch_ + kv_bytes_;
    m.free_bytes = total_ - other_ - m.used_bytes;
    m.weights_bytes = weights_;
    return m;
  }
  size_t scratch() const { return scratch_; }
  // What the runner says it will still allocate; records the limits it was asked for.
  size_t PendingDeviceBytes(int max_num_seqs, int max_model_len) const override {
    pending_asked = {max_num_seqs, max_model_len};
    return pending;
  }

  std::vector<int> allocated, profile_tokens, profile_seqs, profile_argmax;
  int max_end = 0;
  size_t pending = 0;
  mutable std::pair<int, int> pending_asked{0, 0};

 private:
  size_t total_, weights_, other_;
  size_t scratch_ = 0, kv_bytes_ = 0;
  int block_size_ = 4;
};

EngineConfig Config() {
  EngineConfig c;
  c.block_size = 4;
  c.max_num_batched_tokens = 100;
  c.max_num_seqs = 8;
  c.max_model_len = 1000;
  c.gpu_memory_utilization = 0.5;
  return c;
}

TEST(KVCacheSizing, FromFreeDeviceMemoryAfterTheProfileRun) {
  FakeDeviceRunner runner(16 * kGiB, 3 * kGiB, /*other=*/1 * kGiB);
  auto n = ComputeNumKVBlocks(runner, Config());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  // Prefill of 100 tokens over 8 sequences (kLast rows), then 8 decode rows at position 999.
  ASSERT_EQ(runner.profile_tokens, (std::vector<int>{100, 8}));
  EXPECT_EQ(runner.profile_seqs, (std::vector<int>{8, 8}));
  EXPECT_EQ(runner.profile_argmax, (std::vector<int>{0, 8}));
  EXPECT_EQ(runner.max_end, 1000);
  EXPECT_EQ(runner.allocated, (std::vector<int>{1}));  // the profile's 1-block pool
  // 0.5 * 16 GiB - (3 GiB + scratch + the 1-block pool) - margin, over 4 MiB blocks; the other
  // process's 1 GiB does not count against this worker's fraction.
  EXPECT_EQ(runner.scratch(), 100 * kMiB + 8 * 64 * 1024);
  const size_t used = 3 * kGiB + runner.scratch() + 4 * kMiB;
  const size_t expected = (8 * kGiB - used - kDeviceMemoryMarginBytes) / (4 * kMiB);
  EXPECT_EQ(*n, static_cast<int>(expected));
}

TEST(KVCacheSizing, NeverMoreThanTheDeviceHasFree) {
  // Another process holds 11 GiB: 16 - 11 - 3.1 GiB free < 0.5 * 16 - 3.1 GiB.
  FakeDeviceRunner runner(16 * kGiB, 3 * kGiB, /*other=*/11 * kGiB);
  auto n = ComputeNumKVBlocks(runner, Config());
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  const size_t used = 3 * kGiB + runner.scratch() + 4 * kMiB;
  const size_t expected = (5 * kGiB - used - kDeviceMemoryMarginBytes) / (4 * kMiB);
  EXPECT_EQ(*n, static_cast<int>(expected));
}

TEST(KVCacheSizing, TwoWorkersSharingADeviceAtHalfEach) {
  // The first worker's weights and pool are "other" memory for the second.
  EngineConfig c = Config();
  FakeDeviceRunner first(16 * kGiB, 3 * kGiB);
  auto a = ComputeNumKVBlocks(first, c);
  ASSERT_TRUE(a.ok());
  const size_t first_holds = 3 * kGiB + first.scratch() + static_cast<size_t>(*a) * 4 * kMiB;
  FakeDeviceRunner second(16 * kGiB, 3 * kGiB, /*other=*/first_holds);
  auto b = ComputeNumKVBlocks(second, c);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(*a, *b);
}

TEST(KVCacheSizing, EngineCreateAllocatesTheComputedPool) {
  auto runner = std::make_unique<FakeDeviceRunner>(16 * kGiB, 3 * kGiB);
  FakeDeviceRunner* fake = runner.get();
  auto e = Engine::Create(std::move(runner), nullptr, Config());
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(fake->allocated.size(), 2u);
  EXPECT_EQ((*e)->Stats().num_kv_blocks_total, fake->allocated[1]);
  EXPECT_GT(fake->allocated[1], 1000);
}

TEST(KVCacheSizing, ExplicitSizesSkipTheProfileRun) {
  FakeDeviceRunner runner(16 * kGiB, 3 * kGiB);
  EngineConfig c = Config();
  c.num_kv_blocks = 77;
  EXPECT_EQ(*ComputeNumKVBlocks(runner, c), 77);
  c.num_kv_blocks = 0;
  c.kv_cache_bytes = 40 * kMiB + 1;
  EXPECT_EQ(*ComputeNumKVBlocks(runner, c), 10);
  EXPECT_TRUE(runner.profile_tokens.empty());
}

TEST(KVCacheSizing, HostRunnerGetsTheDefaultUpToMaxNumSeqsFullSequences) {
  FakeModelRunner runner;  // GetDeviceMemoryInfo: Unimplemented; 4 KiB blocks of 4 tokens
  EngineConfig c = Config();
  c.max_num_seqs = 1000;  // 1000 x 250 blocks: more than the default's bytes
  EXPECT_EQ(*ComputeNumKVBlocks(runner, c),
            static_cast<int>(kDefaultHostKVCacheBytes / runner.KVBlockBytes(4)));
  c.max_num_seqs = 8;  // 8 sequences of max_model_len 1000: 2000 blocks
  EXPECT_EQ(*ComputeNumKVBlocks(runner, c), 2000);
  c.max_num_seqs = 1;  // tandem generate
  c.max_model_len = 1001;
  EXPECT_EQ(*ComputeNumKVBlocks(runner, c), 251);
  EXPECT_EQ(runner.num_steps, 0);
}

TEST(KVCacheSizing, LongestPrefillSplitsAtMaxModelLen) {
  FakeDeviceRunner runner(16 * kGiB, 1 * kGiB);
  EngineConfig c = Config();
  c.max_num_seqs = 1;
  c.max_num_batched_tokens = 2500;  // more than max_model_len 1000: three sequences
  ASSERT_TRUE(ComputeNumKVBlocks(runner, c).ok());
  EXPECT_EQ(runner.profile_tokens.front(), 2500);
  EXPECT_EQ(runner.profile_seqs.front(), 3);
  EXPECT_LE(runner.max_end, 1000);
}

TEST(KVCacheSizing, TooLittleMemoryForOneRequestNamesTheLargestThatFits) {
  // 0.5 * 8 GiB - 3 GiB - scratch - margin ~ 412 MiB = 103 blocks of 4 tokens < 250 needed.
  FakeDeviceRunner runner(8 * kGiB, 3 * kGiB);
  auto n = ComputeNumKVBlocks(runner, Config());
  ASSERT_EQ(n.status().code(), StatusCode::kResourceExhausted);
  const std::string msg = n.status().message();
  EXPECT_NE(msg.find("max_model_len 1000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the largest max_model_len that fits is"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--gpu-memory-utilization"), std::string::npos) << msg;
  // Nothing left at all.
  FakeDeviceRunner full(8 * kGiB, 5 * kGiB);
  n = ComputeNumKVBlocks(full, Config());
  ASSERT_EQ(n.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(n.status().message().find("no device memory is left"), std::string::npos)
      << n.status().message();
}

TEST(KVCacheSizing, WhatTheRunnerWillStillAllocateIsHeldBack) {
  FakeDeviceRunner plain(16 * kGiB, 3 * kGiB);
  FakeDeviceRunner graphs(16 * kGiB, 3 * kGiB);
  graphs.pending = 40 * kMiB + 1;  // ten 4 MiB blocks and a byte
  auto a = ComputeNumKVBlocks(plain, Config());
  auto b = ComputeNumKVBlocks(graphs, Config());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(graphs.pending_asked, std::make_pair(8, 1000));  // max_num_seqs, max_model_len
  // floor((x - 40 MiB - 1) / 4 MiB) is 10 or 11 blocks fewer than floor(x / 4 MiB).
  EXPECT_GE(*a - *b, 10);
  EXPECT_LE(*a - *b, 11);
}

// Qwen3-8B bf16 on an L40S (44.99 GiB as the runtime reports it): 36 layers x 8 KV heads x 128
// x 2 (K, V) x 2 bytes = 147456 bytes of KV per token, 16.38 GB of weights. With the default
// --gpu-memory-utilization 0.9, a 2 GiB profile step and 0.25 GiB of graphs still to come the pool
// holds what the formula of kv_cache_sizing.h gives: about 22.5 GiB, more than three 40960-token
// requests.
class L40sQwen3_8b : public FakeDeviceRunner {
 public:
  L40sQwen3_8b() : FakeDeviceRunner(46068 * kMiB, 16380000000ull) {}
  size_t KVBlockBytes(int block_size) const override { return 147456ull * block_size; }
};

TEST(KVCacheSizing, Qwen3_8bOnAnL40sGetsAPoolFromTheUtilization) {
  L40sQwen3_8b runner;
  runner.pending = kGiB / 4;
  EngineConfig c;
  c.block_size = 16;
  c.max_num_seqs = 64;
  c.max_num_batched_tokens = 2048;
  c.max_model_len = 40960;
  c.gpu_memory_utilization = 0.9;
  auto n = ComputeNumKVBlocks(runner, c);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  const double used = 16380000000.0 + runner.scratch() + 147456.0 * 16;  // + the 1-block pool
  const double budget = 0.9 * 46068.0 * kMiB - used - kDeviceMemoryMarginBytes - kGiB / 4;
  EXPECT_EQ(*n, static_cast<int>(budget / (147456.0 * 16)));
  const double tokens = static_cast<double>(*n) * 16;
  EXPECT_GT(tokens, 3 * 40960.0);      // room for several full-length requests
  EXPECT_LT(tokens * 147456.0, 30e9);  // and not more than the card has
}

TEST(KVCacheSizing, UtilizationOutOfRange) {
  for (double u : {0.0, -0.1, 1.01}) {
    FakeDeviceRunner runner(16 * kGiB, 1 * kGiB);
    EngineConfig c = Config();
    c.gpu_memory_utilization = u;
    EXPECT_EQ(ComputeNumKVBlocks(runner, c).status().code(), StatusCode::kInvalidArgument) << u;
  }
}

}  // namespace
}  // namespace tandem
