// The KV host tier's cost on the engine thread (issue 26): KvOffloader::BeforeForward for a step
// that evicts N pool blocks of Qwen3-8B's size (36 layers x 16 tokens x 8 KV heads x 128 dims x
// K and V x bf16 = 2.36 MB a block) into a device worker's host tier. The copier is asynchronous
// and moves nothing (a GPU runner enqueues the copies and returns), so what is timed is what the
// engine thread itself does per evicted block: reserving a slot, committing it, and at the next
// step's BeforeForward releasing it (until 2026-12-07 also hashing its bytes). Reported as blocks/s and as bytes of KV offloaded per second
// of engine-thread time (the GPU's D2H copy runs at ~50 GB/s beside it).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvtier/offloader.h"

namespace {

using tandem::Status;
using namespace tandem::kvtier;

constexpr size_t kSlotBytes = size_t{36} * 16 * 8 * 128 * 2 * 2;  // 2,359,296 B

void BM_OffloadEvictedBlocks(benchmark::State& state) {
  const int per_step = static_cast<int>(state.range(0));
  PoolCopier copier;
  copier.async = true;
  copier.copy = [](std::span<const tandem::KvBlockCopy>) { return Status::Ok(); };
  copier.sync = [] { return Status::Ok(); };
  copier.alloc = [](size_t n) {
    void* p = std::malloc(n);
    if (p) std::memset(p, 0x5a, n);  // the pages exist, as a pinned allocation's do
    return p;
  };
  copier.free = [](void* p) { std::free(p); };
  KvOffloader o(copier, kSlotBytes, 256 * kSlotBytes);  // 604 MB: larger than the last-level cache
  uint64_t next_hash = 1;
  std::vector<EvictedBlock> evicted(per_step);
  for (auto _ : state) {
    for (int i = 0; i < per_step; ++i) evicted[i] = {i, next_hash++, 0};
    if (!o.BeforeForward(evicted, {}).ok()) state.SkipWithError("BeforeForward failed");
  }
  state.SetItemsProcessed(state.iterations() * per_step);
  state.SetBytesProcessed(state.iterations() * per_step * static_cast<int64_t>(kSlotBytes));
}
BENCHMARK(BM_OffloadEvictedBlocks)->Arg(1)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
