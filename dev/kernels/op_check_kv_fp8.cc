// cuda_op_check, group kv_fp8: the FP8 E4M3 KV cache (--kv-cache-dtype fp8) on the GPU.
//   qk_norm_rope_cache fp8: the fused K/V write into an FP8 pool against cpu::FloatToFp8E4M3 of
//     what the same kernel writes into a bf16 pool (value / its KV head's scale), bit for bit;
//     slots not written untouched.
//   dequantize_kv_blocks: FP8 blocks gathered into a bf16 pool against bf16(code * scale) on the
//     host (cpu::Fp8E4M3ToFloat), bit for bit.
//   paged_decode fp8: the tensor-core decode kernel over an FP8 pool against cpu::PagedAttention
//     over the same codes and scales (kernels/cpu/paged_attention.h), at Qwen3-8B heads and odd
//     shapes, fixed and automatic splits; timed rows (GB/s of the codes read) beside the bf16
//     kernel at the same shape in the same process.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/kv_dequant.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/qk_norm_rope.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

constexpr int kBlockSize = 16;
constexpr double kTolAttention = 1e-2;  // as op_check_attention.cc: bf16 q and P, fp32 softmax

struct Heads {
  int nh, nkv, hd;
};

template <typename... T>
std::string Fmt(const char* f, T... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

float RoundBf16Host(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (finite inputs)
  u &= 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// Per-KV-head scales: 1.0 (uncalibrated, the engine's default) or random in [0.02, 2] with head
// 0's 0.01 (the cache write saturates its values past 4.48 at +-448).
std::vector<float> Scales(int nkv, bool calibrated, std::mt19937& rng) {
  std::vector<float> s(nkv, 1.0f);
  if (calibrated) {
    for (float& x : s) x = std::uniform_real_distribution<float>(0.02f, 2.0f)(rng);
    s[0] = 0.01f;  // head 0: values past 4.48 saturate
  }
  return s;
}

// Random FP8 codes for a pool whose K/V values are about uniform in [-4, 4] (a few saturate at
// small scales), quantized with the per-head scales as the cache write does.
std::vector<uint8_t> RandomCodes(size_t n, int nkv, int hd, const std::vector<float>& ks,
                                 const std::vector<float>& vs, std::mt19937& rng, int block_size = kBlockSize) {
  std::vector<uint8_t> codes(n);
  const size_t row = static_cast<size_t>(nkv) * hd, half = block_size * row;
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  for (size_t i = 0; i < n; ++i) {
    const int h = static_cast<int>(i % row / hd);
    const bool is_v = (i / half) % 2 == 1;
    codes[i] = cpu::FloatToFp8E4M3(u(rng) / (is_v ? vs[h] : ks[h]));
  }
  return codes;
}

void QkNormRopeCacheFp8Case(int num_tokens, const Heads& h, bool calibrated) {
  std::mt19937 rng(NextSeed());
  const int num_blocks = (num_tokens + kBlockSize - 1) / kBlockSize + 3;
  const int64_t stride = static_cast<int64_t>(h.nh + 2 * h.nkv) * h.hd;
  const size_t pool_elems = static_cast<size_t>(num_blocks) * 2 * kBlockSize * h.nkv * h.hd;
  DevBuf<bf16> qkv(num_tokens * stride), qkv2(num_tokens * stride), norm(h.hd), pool(pool_elems);
  DevBuf<uint8_t> pool8(pool_elems);
  FillUniform(qkv.get(), qkv.size(), NextSeed(), -3.0f, 3.0f);
  FillUniform(norm.get(), h.hd, NextSeed(), 0.5f, 6.0f);  // k values past e4m3's coarse range
  OC_CUDA(cudaMemcpy(qkv2.get(), qkv.get(), qkv.bytes(), cudaMemcpyDeviceToDevice));
  pool.Poison();
  std::vector<uint8_t> before(pool_elems);
  for (uint8_t& c : before) c = static_cast<uint8_t>(rng() & 0x7e);  // finite codes
  pool8.Upload(before);
  std::vector<int32_t> positions(num_tokens);
  for (int32_t& p : positions) p = std::uniform_int_distribution<int>(0, 40959)(rng);
  std::vector<int64_t> slots(static_cast<size_t>(num_blocks) * kBlockSize);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(num_tokens);
  for (int t = 2; t < num_tokens; t += 5) slots[t] = -1;  // padding: no write
  std::vector<float> inv_freq(h.hd / 2);
  for (int i = 0; i < h.hd / 2; ++i) inv_freq[i] = std::pow(1e6f, -2.0f * i / h.hd);
  const std::vector<float> ks = Scales(h.nkv, calibrated, rng), vs = Scales(h.nkv, calibrated, rng);
  DevBuf<int32_t> d_pos(num_tokens);
  DevBuf<int64_t> d_slots(num_tokens);
  DevBuf<float> d_inv(inv_freq.size()), d_ks(h.nkv), d_vs(h.nkv);
  d_pos.Upload(positions);
  d_slots.Upload(slots);
  d_inv.Upload(inv_freq);
  d_ks.Upload(ks);
  d_vs.Upload(vs);
  auto args = [&](bf16* base) {
    cuda::QkNormRopeCacheArgs c;
    c.rope.q = base;
    c.rope.q_stride = stride;
    c.rope.k = base + static_cast<int64_t>(h.nh) * h.hd;
    c.rope.k_stride = stride;
    c.rope.q_norm = norm.get();
    c.rope.k_norm = norm.get();
    c.rope.positions = d_pos.get();
    c.rope.inv_freq = d_inv.get();
    c.rope.num_tokens = num_tokens;
    c.rope.num_heads = h.nh;
    c.rope.num_kv_heads = h.nkv;
    c.rope.head_dim = h.hd;
    c.v = base + static_cast<int64_t>(h.nh + h.nkv) * h.hd;
    c.v_stride = stride;
    c.slot_mapping = d_slots.get();
    c.block_size = kBlockSize;
    return c;
  };
  cuda::QkNormRopeCacheArgs b = args(qkv.get()), f = args(qkv2.get());
  b.kv_pool = pool.get();
  f.kv_pool_fp8 = pool8.get();
  f.k_scales = d_ks.get();
  f.v_scales = d_vs.get();
  OC_OK(cuda::QkNormRopeCache(b, nullptr));
  OC_OK(cuda::QkNormRopeCache(f, nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  const std::vector<float> ref = DownloadFloat(pool);
  const std::vector<uint8_t> got = pool8.Download();
  std::vector<char> written(pool_elems, 0);
  const size_t row = static_cast<size_t>(h.nkv) * h.hd;
  for (int64_t slot : slots) {
    if (slot < 0) continue;
    const size_t at = (static_cast<size_t>(slot / kBlockSize) * 2 * kBlockSize + slot % kBlockSize) * row;
    std::fill_n(written.begin() + at, row, 1);
    std::fill_n(written.begin() + at + kBlockSize * row, row, 1);
  }
  long bad = 0, saturated = 0;
  for (size_t i = 0; i < pool_elems; ++i) {
    uint8_t want = before[i];
    if (written[i]) {
      const int hh = static_cast<int>(i % row / h.hd);
      const bool is_v = (i / (kBlockSize * row)) % 2 == 1;
      want = cpu::FloatToFp8E4M3(ref[i] * (1.0f / (is_v ? vs[hh] : ks[hh])));
      saturated += (want & 0x7f) == 0x7e;
    }
    bad += got[i] != want;
  }
  Row r{"qk_norm_rope_cache fp8", Fmt("T %d heads %d/%d hd %d ", num_tokens, h.nh, h.nkv, h.hd) +
                                      (calibrated ? "scales random" : "scales 1")};
  r.tol = 0;
  r.err.max_abs = static_cast<double>(bad);
  r.pass = bad == 0;
  r.note = Fmt("%ld of %zu codes differ from cpu::FloatToFp8E4M3 of the bf16 pool; %ld saturated",
                 bad, pool_elems, saturated);
  Record(r);
}

void DequantizeKvBlocksCase(const Heads& h, int pool_blocks, int gathered, bool calibrated) {
  std::mt19937 rng(NextSeed());
  const size_t block_elems = size_t{2} * kBlockSize * h.nkv * h.hd;
  const std::vector<float> ks = Scales(h.nkv, calibrated, rng), vs = Scales(h.nkv, calibrated, rng);
  const std::vector<uint8_t> codes = RandomCodes(pool_blocks * block_elems, h.nkv, h.hd, ks, vs, rng);
  std::vector<int32_t> src(gathered);
  for (int32_t& b : src) b = std::uniform_int_distribution<int>(0, pool_blocks - 1)(rng);
  DevBuf<uint8_t> d_codes(codes.size());
  DevBuf<int32_t> d_src(src.size());
  DevBuf<float> d_ks(h.nkv), d_vs(h.nkv);
  DevBuf<bf16> dst(gathered * block_elems);
  d_codes.Upload(codes);
  d_src.Upload(src);
  d_ks.Upload(ks);
  d_vs.Upload(vs);
  dst.Poison();
  cuda::DequantizeKvBlocksArgs a;
  a.src_pool = d_codes.get();
  a.src_blocks = d_src.get();
  a.num_blocks = gathered;
  a.dst_pool = dst.get();
  a.k_scales = calibrated ? d_ks.get() : nullptr;
  a.v_scales = calibrated ? d_vs.get() : nullptr;
  a.block_size = kBlockSize;
  a.num_kv_heads = h.nkv;
  a.head_dim = h.hd;
  OC_OK(cuda::DequantizeKvBlocks(a, nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  const std::vector<float> got = DownloadFloat(dst);
  std::vector<float> want(got.size());
  const size_t row = static_cast<size_t>(h.nkv) * h.hd;
  for (int i = 0; i < gathered; ++i) {
    for (size_t e = 0; e < block_elems; ++e) {
      const int hh = static_cast<int>(e % row / h.hd);
      const float s = e < kBlockSize * row ? ks[hh] : vs[hh];
      want[i * block_elems + e] = RoundBf16Host(cpu::Fp8E4M3ToFloat(codes[src[i] * block_elems + e]) * s);
    }
  }
  long bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &want[i], 4) != 0;
  Row r{"dequantize_kv_blocks", Fmt("%d of %d blocks, kv heads %d hd %d ", gathered, pool_blocks, h.nkv, h.hd) +
                                    (calibrated ? "scales random" : "scales 1")};
  r.tol = 0;
  r.err.max_abs = static_cast<double>(bad);
  r.pass = bad == 0;
  r.note = Fmt("%ld of %zu values differ from bf16(code * scale)", bad, got.size());
  if (!TimingOff() && gathered >= 1024) {
    r.time_us = TimeUs([&] { OC_OK(cuda::DequantizeKvBlocks(a, nullptr)); });
    r.bytes = 3.0 * got.size();  // a code read, a bf16 written
  }
  Record(r);
}

// Decode over an FP8 pool (and, when time_it, the bf16 kernel on the same values beside it).
// block_size: 16 (the engine's) puts a 16-key tile in one block; others take the kernel's per-row
// block lookup.
void DecodeFp8Case(const Heads& h, const std::vector<int>& ctx, int num_splits, bool calibrated,
                   bool time_it, int block_size = kBlockSize) {
  std::mt19937 rng(NextSeed());
  const int num_seqs = static_cast<int>(ctx.size());
  int stride = 0, needed = 0;
  for (int c : ctx) {
    stride = std::max(stride, (c + block_size - 1) / block_size);
    needed += (c + block_size - 1) / block_size;
  }
  const int num_blocks = needed + 3;
  std::vector<int32_t> perm(num_blocks), tables(static_cast<size_t>(num_seqs) * stride, 0);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  int next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    for (int b = 0; b < (ctx[s] + block_size - 1) / block_size; ++b) tables[s * stride + b] = perm[next++];
  }
  const size_t block_elems = size_t{2} * block_size * h.nkv * h.hd;
  const std::vector<float> ks = Scales(h.nkv, calibrated, rng), vs = Scales(h.nkv, calibrated, rng);
  const std::vector<uint8_t> codes = RandomCodes(num_blocks * block_elems, h.nkv, h.hd, ks, vs, rng, block_size);
  const int q_row = h.nh * h.hd;
  DevBuf<uint8_t> pool(codes.size());
  DevBuf<bf16> q(static_cast<size_t>(num_seqs) * q_row), out(q.size());
  DevBuf<int32_t> d_ctx(num_seqs), d_tables(tables.size());
  DevBuf<float> d_ks(h.nkv), d_vs(h.nkv);
  pool.Upload(codes);
  FillUniform(q.get(), q.size(), NextSeed(), -3.0f, 3.0f);
  out.Poison();
  d_ctx.Upload(std::vector<int32_t>(ctx.begin(), ctx.end()));
  d_tables.Upload(tables);
  d_ks.Upload(ks);
  d_vs.Upload(vs);
  cuda::PagedDecodeArgs a;
  a.q = q.get();
  a.q_stride = q_row;
  a.out = out.get();
  a.out_stride = q_row;
  a.kv_pool_fp8 = pool.get();
  a.k_scales = d_ks.get();
  a.v_scales = d_vs.get();
  a.context_lens = d_ctx.get();
  a.block_tables = d_tables.get();
  a.block_table_stride = stride;
  a.num_seqs = num_seqs;
  a.max_context_len = *std::max_element(ctx.begin(), ctx.end());
  a.block_size = block_size;
  a.num_heads = h.nh;
  a.num_kv_heads = h.nkv;
  a.head_dim = h.hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(h.hd));
  a.num_splits = num_splits;
  const size_t ws_bytes = cuda::PagedDecodeWorkspaceBytes(a);
  DevBuf<unsigned char> ws(ws_bytes);
  OC_OK(cuda::PagedDecodeInitWorkspace(ws.get(), ws_bytes, nullptr));
  a.workspace = ws.get();
  a.workspace_bytes = ws_bytes;
  a.workspace_initialized = true;
  const std::vector<float> q_f = DownloadFloat(q);
  double kv = 0;
  for (int c : ctx) kv += 2.0 * c * h.nkv * h.hd;  // codes of K and V read once
  // Timing: in a CUDA graph over copies of the pool (>= 256 MB in all: K/V from HBM, not L2), as
  // op_check_attention.cc times the bf16 kernel; the bf16 kernel on a pool of the same values.
  constexpr int kReps = 20;
  const bool timed = time_it && !TimingOff();
  const int copies = timed ? L2Copies(pool.bytes(), kReps) : 0;
  const std::vector<DevBuf<uint8_t>> pools = timed ? CopiesOf(pool, copies) : std::vector<DevBuf<uint8_t>>{};
  auto time_kernel = [&](cuda::DecodeKernel k) {
    int rep = 0;
    return TimeUsGraph([&](cudaStream_t st) {
      cuda::PagedDecodeArgs b = a;
      b.kernel = k;
      const int c = rep++ % copies;
      if (c > 0) b.kv_pool_fp8 = pools[c - 1].get();
      OC_OK(cuda::PagedDecode(b, st));
    }, kReps, 15);
  };
  double bf16_us = 0, tile_us = 0;
  if (timed) {
    DevBuf<bf16> pool16(codes.size());
    std::vector<float> values(codes.size());
    for (size_t i = 0; i < codes.size(); ++i) values[i] = cpu::Fp8E4M3ToFloat(codes[i]);
    UploadBf16(pool16.get(), values);
    const std::vector<DevBuf<bf16>> pools16 = CopiesOf(pool16, copies);
    int rep = 0;
    bf16_us = TimeUsGraph([&](cudaStream_t st) {
      cuda::PagedDecodeArgs b = a;
      const int c = rep++ % copies;
      b.kv_pool_fp8 = nullptr;
      b.k_scales = b.v_scales = nullptr;
      b.kv_pool = c > 0 ? pools16[c - 1].get() : pool16.get();
      b.kernel = cuda::DecodeKernel::kMma;
      OC_OK(cuda::PagedDecode(b, st));
    }, kReps, 15);
    tile_us = time_kernel(cuda::DecodeKernel::kMmaFp8Tile);
  }
  // Both FP8 kernels: fragments straight from the codes (kMma, the default), the converted tile.
  for (const cuda::DecodeKernel k : {cuda::DecodeKernel::kMma, cuda::DecodeKernel::kMmaFp8Tile}) {
    a.kernel = k;
    out.Poison();
    OC_OK(cuda::PagedDecode(a, nullptr));
    if (ws_bytes > 0) {  // twice: the merge counters must be left zero
      out.Poison();
      OC_OK(cuda::PagedDecode(a, nullptr));
    }
    OC_CUDA(cudaDeviceSynchronize());
    std::vector<float> ref(q_f.size());
    double worst = 0;
    const std::vector<float> got = DownloadFloat(out);
    ErrorStats all;
    for (int s = 0; s < num_seqs; ++s) {
      cpu::PagedAttentionArgs c;
      c.q = q_f.data() + static_cast<size_t>(s) * q_row;
      c.num_tokens = 1;
      c.start_pos = ctx[s] - 1;
      c.kv_pool_fp8 = codes.data();
      c.k_scale = ks.data();
      c.v_scale = vs.data();
      c.block_table = tables.data() + static_cast<size_t>(s) * stride;
      c.block_size = block_size;
      c.num_heads = h.nh;
      c.num_kv_heads = h.nkv;
      c.head_dim = h.hd;
      c.scale = a.scale;
      c.out = ref.data() + static_cast<size_t>(s) * q_row;
      cpu::PagedAttention(c);
      const ErrorStats e = Compare(got.data() + static_cast<size_t>(s) * q_row, c.out, q_row);
      all.non_finite += e.non_finite;
      all.max_abs = std::max(all.max_abs, e.max_abs);
      worst = std::max(worst, e.rel);
    }
    all.rel = worst;
    const bool tile = k == cuda::DecodeKernel::kMmaFp8Tile;
    std::string shape = Fmt("seqs %d ctx %d..%d heads %d/%d hd %d splits %d block %d ", num_seqs,
                            *std::min_element(ctx.begin(), ctx.end()), a.max_context_len, h.nh, h.nkv,
                            h.hd, cuda::PagedDecodeSplits(a), block_size) + (calibrated ? "scales random" : "scales 1");
    Row r{tile ? "paged_decode fp8 tile" : "paged_decode fp8", shape};
    r.err = all;
    r.tol = kTolAttention;
    r.pass = all.non_finite == 0 && all.rel <= r.tol;
    r.note = "worst sequence's relative error";
    if (timed) {
      r.time_us = tile ? tile_us : time_kernel(k);
      r.bytes = kv + 2.0 * q_f.size() * sizeof(bf16);
      r.note += Fmt("; bf16 pool, same shape: %.1f us (%.0f GB/s); fp8/bf16 time %.2f", bf16_us,
                    (2 * kv + 2.0 * q_f.size() * sizeof(bf16)) / bf16_us / 1e3, r.time_us / bf16_us);
      if (!tile) r.note += Fmt("; /tile kernel %.2f (ring %d)", r.time_us / tile_us, cuda::detail::PagedDecodeFp8Ring());
    }
    Record(r);
  }
}

}  // namespace

void CheckKvFp8() {
  const Heads qwen3_8b{32, 8, 128};
  // OPCHECK_KV_FP8_TIMED="256x1024,...": only these decode shapes (batch x context), nothing else
  // of the group (a short run for Nsight Compute: scripts/gpu-check.sh, stage ncu).
  if (const char* only = std::getenv("OPCHECK_KV_FP8_TIMED"); only != nullptr && *only != '\0') {
    for (const char* p = only; *p != '\0';) {
      int seqs = 0, len = 0, used = 0;
      if (std::sscanf(p, "%dx%d%n", &seqs, &len, &used) != 2) break;
      DecodeFp8Case(qwen3_8b, std::vector<int>(seqs, len), 0, false, true);
      p += used;
      if (*p == ',') ++p;
    }
    return;
  }
  for (bool calibrated : {false, true}) {
    QkNormRopeCacheFp8Case(37, qwen3_8b, calibrated);
    QkNormRopeCacheFp8Case(5, {4, 2, 64}, calibrated);
    DequantizeKvBlocksCase(qwen3_8b, 40, 23, calibrated);
    DequantizeKvBlocksCase({4, 2, 64}, 9, 12, calibrated);
  }
  // Odd shapes: a 1-key context, partial tiles, group 1 / 6 / 16, head_dim 64, fixed splits (the
  // in-kernel merge) and the automatic choice.
  DecodeFp8Case(qwen3_8b, {300, 1, 700, 33}, 0, true, false);
  DecodeFp8Case(qwen3_8b, {300, 1, 700, 33}, 7, false, false);
  DecodeFp8Case({24, 4, 128}, {517, 16, 2}, 5, true, false);
  DecodeFp8Case({32, 2, 128}, {250, 17}, 3, true, false);
  DecodeFp8Case({4, 4, 64}, {90, 1, 17}, 3, true, false);
  DecodeFp8Case({8, 2, 64}, {1100, 37}, 0, false, false);
  DecodeFp8Case(qwen3_8b, {300, 1, 77}, 5, true, false, 8);   // tiles across blocks
  DecodeFp8Case({24, 4, 128}, {250, 33}, 0, true, false, 24);
  if (Small()) return;
  QkNormRopeCacheFp8Case(2048, qwen3_8b, true);
  DequantizeKvBlocksCase(qwen3_8b, 4096, 2048, true);
  // The decode shapes of issue 22 / 28 (batch x context), timed beside the bf16 kernel.
  for (const auto& [seqs, len] : std::vector<std::pair<int, int>>{
           {1, 1024}, {1, 4096}, {8, 4096}, {64, 1024}, {64, 4096}, {256, 1024}}) {
    DecodeFp8Case(qwen3_8b, std::vector<int>(seqs, len), 0, false, true);
  }
}

}  // namespace tandem::opcheck
