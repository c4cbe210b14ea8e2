// Paged attention on the GPU over a bf16 KV pool (the CUDA twin of kernels/cpu/paged_attention.h):
// causal grouped-query attention, out = softmax(q k^T * scale) v, fp32 scores and softmax, bf16
// q/k/v/out. Query head h reads KV head h / (num_heads / num_kv_heads).
//
// Pool layout (one layer): [num_blocks, 2 (K,V), block_size, num_kv_heads, head_dim]; a sequence's
// position p lives in block block_tables[s][p / block_size], offset p % block_size. Blocks may be
// anywhere in the pool and shared between sequences (prefix cache). Write this step's K/V first
// (ReshapeAndCache).
//
// Prefill (PagedPrefill): a batch of slices, sequence s owning query tokens
// [query_start_loc[s], query_start_loc[s+1]) at positions [start_pos[s], start_pos[s] + n_s);
// token i attends to positions [0, start_pos[s] + i] (the cached prefix included). FlashAttention-2
// style: 128-query x 64-key tiles on the tensor cores (mma.sync bf16, fp32 accumulate), online
// softmax in registers with the probabilities rounded to bf16 for the P*V product; a 64-query-tile
// variant and the first WMMA kernel stay selectable (PagedPrefillArgs::kernel, or the environment
// variable TANDEM_PREFILL_KERNEL=mma128|mma64|wmma|wgmma for kAuto). head_dim 64 or 128. On Hopper
// (compute capability 9.0, a build with sm_90a code, head_dim 128) kAuto takes the FlashAttention-3
// style kernel instead (paged_prefill_sm90.cu: wgmma, 128-query x 128-key tiles, the P V product
// of one tile under the softmax of the next), with the same numerics.
//
// Decode (PagedDecode): one query per sequence attending to positions [0, context_lens[s]) (its own
// K/V included). Two kernels (PagedDecodeArgs::kernel; kAuto: the environment variable
// TANDEM_DECODE_KERNEL=mma|simt, else mma where it applies):
//   mma (head_dim 64 or 128, up to 16 query heads per KV head, sm_80+, paged_decode_mma.cu): the
//   query heads of a KV head are the rows of m16n8k16 tensor-core tiles; grid (num_splits, KV
//   heads, sequences), 4 warps each streaming 16-key tiles of K and V through their own ring of
//   cp.async shared-memory stages (3 where two CTAs of 106 KiB fit an SM, else 2); its splits
//   come from PagedDecodeChooseMmaSplits, its split results are merged by the last CTA to finish
//   (the reduce kernel without an initialized workspace).
//   simt (every other shape; CUDA cores), described next.
// Split-K (flash-decoding): the grid is (num_splits, KV heads, sequences); sequence
// s's context is cut into at most num_splits chunks (a multiple of 32 keys, at least 32 (kFill) or
// 64 (kLegacy)), one CTA per chunk and KV head serving all query heads of that KV head (up to 8;
// larger groups use several CTAs), 16-byte K/V loads, an online softmax per CTA. When a sequence
// has more than one chunk the partial results are merged with log-sum-exp weights: kFill by the
// last CTA of the (sequence, KV head) to finish (a counter in an initialized workspace; no second
// kernel), kLegacy (or kFill without workspace_initialized) by a second kernel. The grid depends
// on num_seqs and num_splits only (CTAs past a sequence's last chunk exit), so a CUDA graph
// captured with a fixed num_splits serves any contexts. head_dim 64, 128 or 256.
// FP8 E4M3 KV (--kv-cache-dtype fp8): PagedDecodeArgs::kv_pool_fp8 instead of kv_pool, the same
// layout at one byte an element (the codes of kernels/cpu/fp8.h), an element's value its code times
// its KV head's k_scales / v_scales entry. The mma kernel only (head_dim 64 or 128, groups <= 16,
// sm_80+; Unimplemented elsewhere): each warp's 16-key tiles land by cp.async as codes (half of
// bf16's bytes; 4 stages, 68 KiB a CTA at head_dim 128, three CTAs an SM where bf16 fits two; the
// automatic split count still assumes two) and become the f16 MMAs' fragments in registers, each
// code converted exactly (paged_decode_fp8.cu; Q converted to f16 once, P rounded to f16); the
// K scale is folded into the softmax scale and the V scale into the output. Prefill reads bf16: DequantizeKvBlocks (kv_dequant.h) first.
// All pointers are device pointers except where marked host; asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/device_limits.h"

namespace tandem::cuda {

// Which prefill kernel: kAuto (TANDEM_PREFILL_KERNEL if set, else by the device and the batch:
// detail::ChoosePagedPrefillKernel), the mma.sync kernel with 128- or 64-query tiles (8 or 4
// warps), the first WMMA kernel (64-query tiles), or the Hopper kernel (kWgmma,
// paged_prefill_sm90.cu: warpgroup MMA, 128-query x 128-key tiles, head_dim 128, sm_90 devices
// of a build whose TANDEM_CUDA_ARCHS names 90a; kAuto's choice wherever it applies). kWgmma asked
// for where it does not apply runs kAuto's other choice.
enum class PrefillKernel { kAuto, kMma128, kMma64, kWmma, kWgmma };

struct PagedPrefillArgs {
  const __nv_bfloat16* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride q_stride
  int64_t q_stride = 0;
  __nv_bfloat16* out = nullptr;      // [num_tokens, num_heads, head_dim], row stride out_stride
  int64_t out_stride = 0;
  const __nv_bfloat16* kv_pool = nullptr;  // [num_blocks, 2, block_size, num_kv_heads, head_dim]
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1], ascending, [0] = 0
  const int32_t* start_pos = nullptr;        // [num_seqs], cached tokens before each slice
  const int32_t* block_tables = nullptr;     // [num_seqs, block_table_stride]
  int block_table_stride = 0;
  int num_seqs = 0;
  int max_query_len = 0;  // host value: max over s of the slice lengths (sizes the grid)
  int block_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;  // usually 1 / sqrt(head_dim)
  PrefillKernel kernel = PrefillKernel::kAuto;
};

// Largest num_splits PagedDecode accepts.
constexpr int kPagedDecodeMaxSplits = 256;
// Largest num_splits that the tensor-core kernel merges inside a thread-block cluster (sm_90:
// the splits of a (sequence, KV head) are one cluster; 16 is a non-portable cluster size).
constexpr int kPagedDecodeMaxClusterSplits = 16;
// Merge counters at the start of a split launch's workspace (uint32 each, one per (sequence, KV
// head, query-head chunk)); launches with more groups merge with the second kernel instead.
constexpr int kPagedDecodeCounters = 4096;

// How the automatic num_splits is chosen and how split results are merged.
//   kAuto: the environment variable TANDEM_DECODE_SPLITS: unset / "legacy" -> kLegacy, "fill" ->
//          kFill, a number N in [1, 256] -> N splits with kFill's merge. Legacy is the default:
//          in a whole batch-1 Qwen3-8B decode step on the H200 it took 5.22 ms against 5.32 ms
//          with kFill (scripts/gpu/b1_profile.sh, dev/kernels/results/2026-12-01c-*), although
//          kFill's kernel alone is faster at 8 x 1k.
//   kFill: fill the SMs at small batch (PagedDecodeChooseSplits), merge in the last CTA.
//   kLegacy: the first rewrite's choice (about two waves, chunks >= 64) and the reduce kernel.
enum class DecodeSplitPolicy { kAuto, kFill, kLegacy };

// Which decode kernel (see above): kAuto, the tensor-core kernel, or the CUDA-core one. kMma for a
// shape or device it does not serve runs kSimt. kMmaPairLoads: the tensor-core kernel's first
// version (a lane pair per K/V row, page-table reads in front of each tile), kept to be measured
// beside kMma (cuda_op_check); TANDEM_DECODE_KERNEL=mma-pairs. kMmaFp8Tile (FP8 pools only; kMma
// elsewhere): the first FP8 kernel, which converts each landed tile of codes to an f16 tile in
// shared memory and reads it with ldmatrix, kept to be measured beside kMma's fragments straight
// from the codes (paged_decode_fp8.cu); TANDEM_DECODE_KERNEL=mma-fp8-tile.
// Split merge of kMma over a bf16 pool: on sm_90 devices, where the split count is 2 to
// kPagedDecodeMaxClusterSplits (the automatic choice is capped there: detail::
// PagedDecodeClusterSplitsMax), the splits of a (sequence, KV head) are one thread-block cluster
// and merge through distributed shared memory (paged_decode_mma.cuh); elsewhere, and with
// kMmaGlobalMerge (TANDEM_DECODE_KERNEL=mma-global, kept to be measured beside it), the split
// results go through the workspace and the last CTA to finish merges them. TANDEM_DECODE_CLUSTER
// =8|16 turns the cluster merge on with that largest cluster (unset or 0: off; it has not yet run
// on a GPU, 2026-12-04: built for sm_90a, no device time left in that session).
enum class DecodeKernel { kAuto, kMma, kSimt, kMmaPairLoads, kMmaFp8Tile, kMmaGlobalMerge };

struct PagedDecodeArgs {
  const __nv_bfloat16* q = nullptr;  // [num_seqs, num_heads, head_dim], row stride q_stride
  int64_t q_stride = 0;
  __nv_bfloat16* out = nullptr;      // [num_seqs, num_heads, head_dim], row stride out_stride
  int64_t out_stride = 0;
  const __nv_bfloat16* kv_pool = nullptr;  // [num_blocks, 2, block_size, num_kv_heads, head_dim]
  // FP8 KV instead (kv_pool null): codes in kv_pool's layout, one byte each; k_scales / v_scales
  // [num_kv_heads] fp32 (device; null: 1.0).
  const uint8_t* kv_pool_fp8 = nullptr;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  const int32_t* context_lens = nullptr;  // [num_seqs], >= 1, this step's token included
  const int32_t* block_tables = nullptr;  // [num_seqs, block_table_stride]
  int block_table_stride = 0;
  int num_seqs = 0;
  int max_context_len = 0;  // host value: >= every context_lens[s] (the automatic num_splits)
  int block_size = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;
  // Context splits per sequence (grid x), 1..kPagedDecodeMaxSplits; 0: chosen by `policy`.
  int num_splits = 0;
  DecodeSplitPolicy policy = DecodeSplitPolicy::kAuto;  // the simt kernel's splits and merge
  DecodeKernel kernel = DecodeKernel::kAuto;
  // PagedDecodeWorkspaceBytes(args) bytes, 16-byte aligned. Its first kPagedDecodeCounters * 4
  // bytes are merge counters: zero them once after allocating (PagedDecodeInitWorkspace) and set
  // workspace_initialized; every launch leaves them zero again. Without it kFill merges with the
  // reduce kernel (a second launch) as kLegacy does.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool workspace_initialized = false;
};

// The automatic split choice, a pure function of the shape (documented here so that the numbers can
// be checked by hand). cta_per_split = num_seqs * num_kv_heads * ceil(group / 8), group = num_heads
// / num_kv_heads (the CTAs one split adds).
//   kFill:   cta_per_split >= 2 * num_sms -> 1 (large batches: unchanged from kLegacy);
//            else min(ceil(4 * num_sms / cta_per_split), ceil(max_context_len / 32), 64), >= 1:
//            about one wave of 4 resident CTAs per SM (groups <= 4: 128 threads, 128 registers,
//            17 KB of shared memory each), chunks of >= 32 keys (one CTA iteration at head_dim
//            128, group <= 4). Qwen3-8B (8 KV heads, group 4) on 132 SMs: 1x1k -> 32 splits
//            (256 CTAs of 32 keys), 1x4k -> 64 (512 CTAs of 64), 8x1k -> 9 (8 used: 512 CTAs of
//            128), 16x1k -> 5, 32x1k -> 3, >= 33 sequences -> 1.
//   kLegacy: cta_per_split >= 2 * num_sms -> 1; else min(ceil(2 * num_sms / cta_per_split),
//            ceil(max_context_len / 64), 64): 1x1k -> 16, 1x4k -> 33, 8x1k -> 5.
int PagedDecodeChooseSplits(int num_seqs, int num_heads, int num_kv_heads, int max_context_len,
                            int num_sms, DecodeSplitPolicy policy);
// The mma kernel's automatic choice: as many splits as make the CTAs of one wave, floor(ctas_per_sm
// * num_sms / (num_seqs * num_kv_heads)), at most ceil(max_context_len / 64) (a 16-key tile per
// warp) and 64, at least 1 (one split from num_seqs * num_kv_heads >= one wave on). Fewer CTAs than
// slots rather than a second, mostly empty wave: the keys stream at the same rate either way.
// Qwen3-8B on an H200 (132 SMs, 2 CTAs each): 1x1k -> 16, 1x4k -> 33, 8x1k -> 4, 8x16k -> 4,
// >= 33 sequences -> 1.
int PagedDecodeChooseMmaSplits(int num_seqs, int num_kv_heads, int max_context_len, int num_sms,
                               int ctas_per_sm);
// The num_splits a launch with these args uses (args.num_splits when > 0, else TANDEM_DECODE_SPLITS
// when it names a number, else the choice of the kernel the args and the current device get).
int PagedDecodeSplits(const PagedDecodeArgs& args);
// kAuto resolved through TANDEM_DECODE_SPLITS (read once); kFill / kLegacy returned as given.
DecodeSplitPolicy PagedDecodeResolvePolicy(DecodeSplitPolicy policy);
// Device scratch the launch needs (0 with one split): the merge counters, then partial outputs
// [num_seqs, num_heads, splits, head_dim] fp32 and two [num_seqs, num_heads, splits] fp32 arrays
// (max logit, exp sum).
size_t PagedDecodeWorkspaceBytes(const PagedDecodeArgs& args);

namespace detail {
cudaError_t LaunchPagedPrefill(const PagedPrefillArgs& args, cudaStream_t stream);
// The kernel PagedPrefill launches for `args` on a device with `limits` (kAuto resolved: the
// environment, the device's shared memory per block and SM count; PagedPrefill passes the current
// device's CurrentDeviceLimits()), and the dynamic shared memory of a kernel at head_dim 64 or 128
// (bytes; 0 for kAuto or another head_dim).
PrefillKernel ChoosePagedPrefillKernel(const PagedPrefillArgs& args, const DeviceLimits& limits);
size_t PagedPrefillSmemBytes(PrefillKernel kernel, int head_dim);
// The Hopper kernel (paged_prefill_sm90.cu): whether this build holds it (sm_90a code), its
// dynamic shared memory (bytes), and its launch (head_dim 128; cudaErrorInvalidValue otherwise).
bool PagedPrefillWgmmaBuilt();
size_t PagedPrefillWgmmaSmemBytes();
cudaError_t LaunchPagedPrefillWgmma(const PagedPrefillArgs& args, cudaStream_t stream);
cudaError_t LaunchPagedDecode(const PagedDecodeArgs& args, cudaStream_t stream);
// The decode kernel a launch with `args` runs on a device with `limits` (kAuto resolved: the
// environment, then the shape and the device), the mma kernel's stages there (3, 2, or 0 when its
// shared memory does not fit; head_dim 64 or 128) and its resident CTAs per SM (by shared memory,
// at most 4).
DecodeKernel ChoosePagedDecodeKernel(const PagedDecodeArgs& args, const DeviceLimits& limits);
int PagedDecodeMmaStages(int head_dim, const DeviceLimits& limits);
// Whether the tensor-core decode kernel serves this shape on a device with `limits` (sm_80+, at most
// 16 query heads per KV head, head_dim 64 or 128 with its shared memory fitting): the kernel kAuto
// takes there, and the only one that reads an FP8 pool.
bool PagedDecodeMmaFits(int num_heads, int num_kv_heads, int head_dim, const DeviceLimits& limits);
// The FP8 kernel's cp.async ring a warp (paged_decode_fp8.cu), read once from
// TANDEM_DECODE_FP8_RING: 4 (the default; 68 KiB a CTA at head_dim 128, three CTAs an SM) or 3
// (52 KiB, four CTAs, within 128 registers a thread: it spills). H200, 256 x 1k: 159 us with 4,
// 241 us with 3 (dev/kernels/results/2026-12-04c-*).
int PagedDecodeFp8Ring();
int PagedDecodeMmaCtasPerSm(int head_dim, const DeviceLimits& limits);
// The cluster merge (see DecodeKernel): the largest split count it serves for kMma at head_dim 64
// or 128 on the current device: 0 (off: TANDEM_DECODE_CLUSTER unset or 0, not sm_90+, or no
// cluster of 8 fits), else 8 or 16 (16 where TANDEM_DECODE_CLUSTER=16 and at least half of the
// device's CTA slots run in clusters of 16, cudaOccupancyMaxActiveClusters). Read once per head_dim.
int PagedDecodeClusterSplitsMax(int head_dim);
// Whether a launch with `args` merges its splits in a cluster (the chosen kernel kMma over a bf16
// pool, 2 <= PagedDecodeSplits(args) <= PagedDecodeClusterSplitsMax(head_dim)).
bool PagedDecodeUsesCluster(const PagedDecodeArgs& args);
cudaError_t LaunchPagedDecodeInitWorkspace(void* workspace, size_t bytes, cudaStream_t stream);
}  // namespace detail
}  // namespace tandem::cuda

#ifndef __CUDACC__
#include "common/status.h"

namespace tandem::cuda {

// Errors: InvalidArgument (sizes, head counts not dividing, null pointers, row strides, q / kv_pool
// / workspace not 16-byte aligned, a workspace too small, both or neither of kv_pool and
// kv_pool_fp8), Unimplemented (an unsupported head_dim; FP8 KV where the mma kernel does not run), Internal (CUDA). Device-side values (start positions,
// context lengths, block ids) are not checked: the caller validates them on the host.
Status PagedPrefill(const PagedPrefillArgs& args, cudaStream_t stream);
Status PagedDecode(const PagedDecodeArgs& args, cudaStream_t stream);
// Zeroes the merge counters of a decode workspace of `bytes` bytes (a kernel on `stream`; nothing
// when bytes == 0). Call once after allocating it. Errors: InvalidArgument (null with bytes > 0),
// Internal (CUDA).
Status PagedDecodeInitWorkspace(void* workspace, size_t bytes, cudaStream_t stream);

}  // namespace tandem::cuda
#endif
