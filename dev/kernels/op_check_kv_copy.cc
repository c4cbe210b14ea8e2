// cuda_op_check "kv_copy": cuda::KvBlockCopy (kv_block_copy.h) between a paged KV pool and
// page-locked host slots, against the bytes themselves: pool blocks copied out to slots must equal
// the pool's bytes, and copied back into other blocks must equal the slots, bit for bit. Timed
// (not --small): Qwen3-8B's pool layout (36 layers, 64 KB per layer and block), 128 blocks in
// each direction, beside one cudaMemcpyAsync per layer and block and one contiguous pinned copy of
// the same bytes (the link's bandwidth).
#include <algorithm>
#include <cstring>
#include <random>
#include <string>

#include "kernels/cuda/kv_block_copy.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

struct PinnedHost {
  explicit PinnedHost(size_t n) : bytes(n) { OC_CUDA(cudaMallocHost(&p, n)); }
  ~PinnedHost() { cudaFreeHost(p); }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  char* get() const { return static_cast<char*>(p); }
  void* p = nullptr;
  size_t bytes;
};

// max_ctas < 0: the copy engines (cuda::KvBlockCopyBatched) instead of the kernel.
void KvCopyCase(int layers, int num_blocks, size_t block_bytes, int n, bool timed, int max_ctas = 0) {
  cudaStream_t stream = nullptr;  // the batched copies refuse the legacy default stream
  OC_CUDA(cudaStreamCreate(&stream));  // a blocking stream: it syncs with TimeUs's default-stream events
  auto copy = [&](const std::vector<cuda::KvBlockCopyEntry>& entries, const std::vector<void*>& bases) {
    return max_ctas < 0 ? cuda::KvBlockCopyBatched(bases, block_bytes, entries, stream)
                        : cuda::KvBlockCopy(bases, block_bytes, entries, nullptr, max_ctas);
  };
  std::vector<DevBuf<bf16>> pool;
  std::vector<void*> bases;
  for (int l = 0; l < layers; ++l) {
    pool.emplace_back(num_blocks * block_bytes / 2);
    FillUniform(pool.back().get(), pool.back().size(), NextSeed(), -1.0f, 1.0f);
    bases.push_back(pool.back().get());
  }
  const size_t slot = layers * block_bytes;
  PinnedHost host(n * slot);
  std::memset(host.get(), 0x5a, host.bytes);
  std::mt19937 rng(static_cast<uint32_t>(NextSeed()));
  std::vector<int> ids(num_blocks);
  for (int i = 0; i < num_blocks; ++i) ids[i] = i;
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<cuda::KvBlockCopyEntry> out, in;
  for (int i = 0; i < n; ++i) {
    out.push_back({ids[i], host.get() + i * slot, true});
    in.push_back({ids[num_blocks - 1 - i], host.get() + i * slot, false});  // other blocks
  }
  char text[128];
  std::snprintf(text, sizeof(text), "%d blocks, %d layers x %zu B%s", n, layers, block_bytes,
                max_ctas > 0   ? (", " + std::to_string(max_ctas) + " CTAs").c_str()
                : max_ctas < 0 ? ", copy engines (cudaMemcpyBatchAsync)"
                               : "");
  // Out: slot i = block ids[i] of every layer.
  Row row_out{"kv_copy", std::string(text) + " pool->host"};
  OC_OK(copy(out, bases));
  OC_CUDA(cudaDeviceSynchronize());
  long bad = 0;
  std::vector<char> want(block_bytes);
  for (int i = 0; i < n; ++i) {
    for (int l = 0; l < layers; ++l) {
      OC_CUDA(cudaMemcpy(want.data(), static_cast<char*>(bases[l]) + ids[i] * block_bytes, block_bytes,
                         cudaMemcpyDeviceToHost));
      bad += std::memcmp(want.data(), host.get() + i * slot + l * block_bytes, block_bytes) != 0;
    }
  }
  row_out.pass = bad == 0;
  row_out.note = std::to_string(bad) + " (block, layer) pieces differ";
  // In: slot i into block ids[num_blocks - 1 - i].
  Row row_in{"kv_copy", std::string(text) + " host->pool"};
  OC_OK(copy(in, bases));
  OC_CUDA(cudaDeviceSynchronize());
  bad = 0;
  for (int i = 0; i < n; ++i) {
    for (int l = 0; l < layers; ++l) {
      OC_CUDA(cudaMemcpy(want.data(), static_cast<char*>(bases[l]) + ids[num_blocks - 1 - i] * block_bytes,
                         block_bytes, cudaMemcpyDeviceToHost));
      bad += std::memcmp(want.data(), host.get() + i * slot + l * block_bytes, block_bytes) != 0;
    }
  }
  row_in.pass = bad == 0;
  row_in.note = std::to_string(bad) + " (block, layer) pieces differ";
  if (timed) {
    const double bytes = static_cast<double>(n) * slot;
    DevBuf<char> flat(static_cast<size_t>(bytes));
    const double link_us = TimeUs([&] {
      OC_CUDA(cudaMemcpyAsync(flat.get(), host.get(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice, nullptr));
    }, 3, 9);
    const double memcpy_us = TimeUs([&] {
      for (const auto& e : in)
        for (int l = 0; l < layers; ++l)
          OC_CUDA(cudaMemcpyAsync(static_cast<char*>(bases[l]) + e.block_id * block_bytes,
                                  static_cast<char*>(e.host) + l * block_bytes, block_bytes,
                                  cudaMemcpyHostToDevice, nullptr));
    }, 3, 9);
    row_in.time_us = TimeUs([&] { OC_OK(copy(in, bases)); }, 3, 9);
    row_out.time_us = TimeUs([&] { OC_OK(copy(out, bases)); }, 3, 9);
    row_in.bytes = row_out.bytes = bytes;
    char note[200];
    std::snprintf(note, sizeof(note), "; %.1f GB/s = %.0f%% of one pinned H2D copy (%.1f GB/s); "
                  "cudaMemcpyAsync per layer and block %.1f GB/s", bytes / row_in.time_us / 1e3,
                  100 * link_us / row_in.time_us, bytes / link_us / 1e3, bytes / memcpy_us / 1e3);
    row_in.note += note;
    std::snprintf(note, sizeof(note), "; %.1f GB/s", bytes / row_out.time_us / 1e3);
    row_out.note += note;
  }
  Record(row_out);
  Record(row_in);
  OC_CUDA(cudaStreamDestroy(stream));
}

}  // namespace

void CheckKvBlockCopy() {
  if (!Small()) {
    KvCopyCase(36, 512, 65536, 128, true);  // Qwen3-8B: 16 tokens x 8 heads x 128 x K,V bf16
    // The KV tier's onboarding on its side stream (cuda_kv_onboard.h) bounds the grid.
    for (int ctas : {8, 16, 32}) KvCopyCase(36, 512, 65536, 128, true, ctas);
    KvCopyCase(36, 512, 65536, 128, true, -1);  // the copy engines
  }
  KvCopyCase(3, 9, 4096, 5, false);
  KvCopyCase(3, 9, 4096, 5, false, 2);  // 2 CTAs stride over 5 x 3 x 1 pieces
  KvCopyCase(2, 300, 16, 140, false);  // more entries than one launch takes; a block of 16 bytes
  KvCopyCase(1, 4, 20000, 2, false);   // a block in two pieces, the second partial
  KvCopyCase(1, 4, 20000, 2, false, 3);
  KvCopyCase(3, 9, 4096, 5, false, -1);
  KvCopyCase(1, 4, 20000, 2, false, -1);
}

}  // namespace tandem::opcheck
