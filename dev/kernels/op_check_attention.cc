// cuda_op_check: paged attention (prefill and decode) against cpu::PagedAttention, over shuffled,
// non-contiguous block tables with prefix blocks shared between sequences.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/paged_attention.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

// bf16 q/k/v, fp32 softmax; the probabilities are rounded to bf16 for P V (prefill) and the output
// once more: a few 1e-3 expected.
constexpr double kTolAttention = 1e-2;
constexpr int kBlockSize = 16;

struct Heads {
  int nh, nkv, hd;
};

// Block tables for sequences of the given context lengths out of a shuffled pool; sequence s > 0
// with share[s] > 0 reuses the first share[s] blocks of sequence 0 (a prefix-cache hit).
struct Tables {
  std::vector<int32_t> flat;  // [num_seqs, stride]
  int stride = 0;
  int num_blocks = 0;
};

Tables MakeTables(const std::vector<int>& ctx, const std::vector<int>& share, std::mt19937& rng) {
  Tables t;
  int needed = 0;
  for (int c : ctx) {
    const int blocks = (c + kBlockSize - 1) / kBlockSize;
    t.stride = std::max(t.stride, blocks);
    needed += blocks;
  }
  t.num_blocks = needed + needed / 4 + 3;  // spare blocks nobody reads
  std::vector<int32_t> perm(t.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  t.flat.assign(ctx.size() * t.stride, -1);
  int next = 0;
  const int blocks0 = (ctx[0] + kBlockSize - 1) / kBlockSize;
  for (size_t s = 0; s < ctx.size(); ++s) {
    const int blocks = (ctx[s] + kBlockSize - 1) / kBlockSize;
    const int num_shared = s == 0 ? 0 : std::min({share[s], blocks, blocks0});
    for (int b = 0; b < blocks; ++b) {
      const bool shared = b < num_shared;
      t.flat[s * t.stride + b] = shared ? t.flat[b] : perm[next++];
    }
  }
  return t;
}

// The worst sequence decides: a batch-wide norm is dominated by short contexts (a context of 1
// returns v exactly) and would hide an error in a long one. Rows are [token, num_heads * head_dim].
ErrorStats CompareBySequence(const std::vector<float>& out, const std::vector<float>& ref,
                             const std::vector<int32_t>& row_start, int row_elems, std::string* note) {
  ErrorStats worst = Compare(out, ref);
  const double overall = worst.rel;
  worst.rel = 0;
  int worst_seq = 0;
  for (size_t s = 0; s + 1 < row_start.size(); ++s) {
    const size_t begin = static_cast<size_t>(row_start[s]) * row_elems;
    const size_t n = static_cast<size_t>(row_start[s + 1] - row_start[s]) * row_elems;
    const ErrorStats e = Compare(out.data() + begin, ref.data() + begin, n);
    if (!(e.rel <= worst.rel)) {
      worst.rel = e.rel;
      worst_seq = static_cast<int>(s);
    }
  }
  char buf[96];
  std::snprintf(buf, sizeof(buf), "worst seq %d; batch rel %.2e", worst_seq, overall);
  *note = buf;
  return worst;
}

std::string Describe(const Heads& h, const std::vector<int>& a, const std::vector<int>& b) {
  char buf[160];
  int max_a = 0, sum_b = 0;
  for (int x : a) max_a = std::max(max_a, x);
  for (int x : b) sum_b += x;
  std::snprintf(buf, sizeof(buf), "h %d/%d hd %d seqs %zu max_ctx %d new %d", h.nh, h.nkv, h.hd,
                a.size(), max_a, sum_b);
  return buf;
}

// Prefill of slices (start_pos[s], n[s]); share[s]: leading blocks shared with sequence 0.
// One row per kernel (default: kAuto). check_rows > 0: compare only the last check_rows query rows
// of each slice (the CPU reference of an 8k prompt would take minutes; the last rows see the most
// keys).
using PK = cuda::PrefillKernel;
void PrefillCase(const Heads& h, const std::vector<int>& start, const std::vector<int>& n,
                 const std::vector<int>& share, bool time_it,
                 const std::vector<PK>& kernels = {PK::kAuto}, int check_rows = 0) {
  std::mt19937 rng(NextSeed());
  const int num_seqs = static_cast<int>(n.size());
  std::vector<int> ctx(num_seqs);
  std::vector<int32_t> qsl(num_seqs + 1, 0);
  int max_n = 0;
  for (int s = 0; s < num_seqs; ++s) {
    ctx[s] = start[s] + n[s];
    qsl[s + 1] = qsl[s] + n[s];
    max_n = std::max(max_n, n[s]);
  }
  const int T = qsl[num_seqs];
  const Tables tables = MakeTables(ctx, share, rng);
  const int64_t row_elems = int64_t{h.nkv} * h.hd;
  const int64_t q_stride = int64_t{h.nh + 2 * h.nkv} * h.hd;  // q inside a fused qkv buffer
  DevBuf<bf16> pool(static_cast<size_t>(tables.num_blocks) * 2 * kBlockSize * row_elems);
  DevBuf<bf16> qkv(T * q_stride), out(static_cast<size_t>(T) * h.nh * h.hd);
  FillUniform(pool.get(), pool.size(), NextSeed(), -1.0f, 1.0f);
  FillUniform(qkv.get(), qkv.size(), NextSeed(), -3.0f, 3.0f);
  out.Poison();
  DevBuf<int32_t> d_qsl(qsl.size()), d_start(num_seqs), d_tables(tables.flat.size());
  d_qsl.Upload(qsl);
  d_start.Upload(std::vector<int32_t>(start.begin(), start.end()));
  d_tables.Upload(tables.flat);
  cuda::PagedPrefillArgs a;
  a.q = qkv.get();
  a.q_stride = q_stride;
  a.out = out.get();
  a.out_stride = int64_t{h.nh} * h.hd;
  a.kv_pool = pool.get();
  a.query_start_loc = d_qsl.get();
  a.start_pos = d_start.get();
  a.block_tables = d_tables.get();
  a.block_table_stride = tables.stride;
  a.num_seqs = num_seqs;
  a.max_query_len = max_n;
  a.block_size = kBlockSize;
  a.num_heads = h.nh;
  a.num_kv_heads = h.nkv;
  a.head_dim = h.hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(h.hd));
  auto run = [&] { OC_OK(cuda::PagedPrefill(a, nullptr)); };

  const auto pool_f = DownloadFloat(pool);
  const auto qkv_f = DownloadFloat(qkv);
  const int q_row = h.nh * h.hd;
  std::vector<float> q(static_cast<size_t>(T) * q_row), ref(q.size());
  for (int t = 0; t < T; ++t) std::copy_n(qkv_f.begin() + t * q_stride, q_row, q.begin() + t * q_row);
  // Checked rows of slice s: [qsl[s] + skip[s], qsl[s + 1]).
  std::vector<int> skip(num_seqs, 0);
  if (check_rows > 0) {
    for (int s = 0; s < num_seqs; ++s) skip[s] = std::max(0, n[s] - check_rows);
  }
  double flops = 0;
  for (int s = 0; s < num_seqs; ++s) {
    cpu::PagedAttentionArgs c;
    c.q = q.data() + static_cast<size_t>(qsl[s] + skip[s]) * q_row;
    c.num_tokens = n[s] - skip[s];
    c.start_pos = start[s] + skip[s];
    c.kv_pool = pool_f.data();
    c.block_table = tables.flat.data() + static_cast<size_t>(s) * tables.stride;
    c.block_size = kBlockSize;
    c.num_heads = h.nh;
    c.num_kv_heads = h.nkv;
    c.head_dim = h.hd;
    c.scale = a.scale;
    c.out = ref.data() + static_cast<size_t>(qsl[s] + skip[s]) * q_row;
    cpu::PagedAttention(c);
    // Causal FLOPs actually needed: 4 * heads * head_dim per (query, visible key) pair.
    for (int i = 0; i < n[s]; ++i) flops += 4.0 * h.nh * h.hd * (start[s] + i + 1);
  }
  // Only the checked rows (all by default), and their slice boundaries.
  auto checked = [&](const std::vector<float>& all) {
    std::vector<float> rows;
    for (int s = 0; s < num_seqs; ++s) {
      rows.insert(rows.end(), all.begin() + static_cast<size_t>(qsl[s] + skip[s]) * q_row,
                  all.begin() + static_cast<size_t>(qsl[s + 1]) * q_row);
    }
    return rows;
  };
  std::vector<int32_t> checked_qsl(1, 0);
  for (int s = 0; s < num_seqs; ++s) checked_qsl.push_back(checked_qsl.back() + n[s] - skip[s]);
  const std::vector<float> ref_checked = checked(ref);

  for (PK kernel : kernels) {
    static const char* const kNames[] = {"", " mma128", " mma64", " wmma", " wgmma"};
    a.kernel = kernel;
    out.Poison();
    run();
    OC_CUDA(cudaDeviceSynchronize());
    Row row{"paged_prefill", Describe(h, ctx, n) + kNames[static_cast<int>(kernel)]};
    row.err = CompareBySequence(checked(DownloadFloat(out)), ref_checked, checked_qsl, q_row,
                                &row.note);
    if (check_rows > 0) row.note += "; last " + std::to_string(check_rows) + " rows checked";
    row.tol = kTolAttention;
    row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol;
    if (time_it) {
      row.time_us = TimeUs(run, 3, 9);
      row.flops = flops;
    }
    Record(row);
  }
}

// Decode: one query per sequence over ctx[s] keys.
// num_splits: 0 the automatic choice, else fixed (as a CUDA graph of the runner does); policy:
// the split choice and merge (kAuto: TANDEM_DECODE_SPLITS). With splits the kernel runs twice on
// the same workspace (the second result is checked: the merge counters must be left zero).
using Policy = cuda::DecodeSplitPolicy;
using DK = cuda::DecodeKernel;
void DecodeCase(const Heads& h, const std::vector<int>& ctx, const std::vector<int>& share,
                bool time_it, int num_splits = 0, Policy policy = Policy::kAuto,
                DK kernel = DK::kAuto) {
  std::mt19937 rng(NextSeed());
  const int num_seqs = static_cast<int>(ctx.size());
  const Tables tables = MakeTables(ctx, share, rng);
  const int64_t row_elems = int64_t{h.nkv} * h.hd;
  const int q_row = h.nh * h.hd;
  const int max_ctx = *std::max_element(ctx.begin(), ctx.end());
  DevBuf<bf16> pool(static_cast<size_t>(tables.num_blocks) * 2 * kBlockSize * row_elems);
  DevBuf<bf16> q(static_cast<size_t>(num_seqs) * q_row), out(q.size());
  FillUniform(pool.get(), pool.size(), NextSeed(), -1.0f, 1.0f);
  FillUniform(q.get(), q.size(), NextSeed(), -3.0f, 3.0f);
  out.Poison();
  DevBuf<int32_t> d_ctx(num_seqs), d_tables(tables.flat.size());
  d_ctx.Upload(std::vector<int32_t>(ctx.begin(), ctx.end()));
  d_tables.Upload(tables.flat);
  cuda::PagedDecodeArgs a;
  a.q = q.get();
  a.q_stride = q_row;
  a.out = out.get();
  a.out_stride = q_row;
  a.kv_pool = pool.get();
  a.context_lens = d_ctx.get();
  a.block_tables = d_tables.get();
  a.block_table_stride = tables.stride;
  a.num_seqs = num_seqs;
  a.max_context_len = max_ctx;
  a.block_size = kBlockSize;
  a.num_heads = h.nh;
  a.num_kv_heads = h.nkv;
  a.head_dim = h.hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(h.hd));
  a.num_splits = num_splits;
  a.policy = policy;
  a.kernel = kernel;
  const DK chosen = cuda::detail::ChoosePagedDecodeKernel(a, cuda::CurrentDeviceLimits());
  const bool mma = chosen != DK::kSimt;
  const size_t ws_bytes = cuda::PagedDecodeWorkspaceBytes(a);
  DevBuf<unsigned char> ws(ws_bytes);
  if (ws_bytes > 0) ws.Poison();
  OC_OK(cuda::PagedDecodeInitWorkspace(ws.get(), ws_bytes, nullptr));
  a.workspace = ws.get();
  a.workspace_bytes = ws_bytes;
  a.workspace_initialized = true;
  auto run = [&] { OC_OK(cuda::PagedDecode(a, nullptr)); };
  run();
  if (ws_bytes > 0) {
    out.Poison();
    run();
  }
  OC_CUDA(cudaDeviceSynchronize());

  const auto pool_f = DownloadFloat(pool);
  const auto q_f = DownloadFloat(q);
  std::vector<float> ref(q_f.size());
  double bytes = 2.0 * q_f.size() * sizeof(bf16);
  for (int s = 0; s < num_seqs; ++s) {
    cpu::PagedAttentionArgs c;
    c.q = q_f.data() + static_cast<size_t>(s) * q_row;
    c.num_tokens = 1;
    c.start_pos = ctx[s] - 1;
    c.kv_pool = pool_f.data();
    c.block_table = tables.flat.data() + static_cast<size_t>(s) * tables.stride;
    c.block_size = kBlockSize;
    c.num_heads = h.nh;
    c.num_kv_heads = h.nkv;
    c.head_dim = h.hd;
    c.scale = a.scale;
    c.out = ref.data() + static_cast<size_t>(s) * q_row;
    cpu::PagedAttention(c);
    bytes += 2.0 * ctx[s] * row_elems * sizeof(bf16);  // K and V of every position, read once
  }
  std::vector<int> ones(num_seqs, 1);
  const Policy resolved = cuda::PagedDecodeResolvePolicy(policy);
  std::string tag = chosen == DK::kMmaPairLoads      ? " mma pairs"
                    : chosen == DK::kMmaGlobalMerge ? " mma global"
                    : mma && cuda::detail::PagedDecodeUsesCluster(a) ? " mma cluster"
                    : mma                           ? " mma"
                    : policy == Policy::kAuto       ? " simt"
                    : resolved == Policy::kLegacy   ? " simt legacy"
                                                    : " simt fill";
  tag += (num_splits > 0 ? " splits " : " auto ") + std::to_string(cuda::PagedDecodeSplits(a));
  Row row{"paged_decode", Describe(h, ctx, ones) + tag};
  std::vector<int32_t> seq_rows(num_seqs + 1);
  std::iota(seq_rows.begin(), seq_rows.end(), 0);
  row.err = CompareBySequence(DownloadFloat(out), ref, seq_rows, q_row, &row.note);
  row.tol = kTolAttention;
  row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol;
  if (time_it && !TimingOff()) {
    // In a CUDA graph, as the engine's decode step runs it, each launch on the next of `copies`
    // copies of the pool (>= 256 MB in all, so K/V come from HBM as in a real step, not from the
    // 50 MB L2 that a small pool would stay in); the stream-launched time on one pool beside it.
    constexpr int kReps = 20;
    const int copies = L2Copies(pool.bytes(), kReps);
    const std::vector<DevBuf<bf16>> pools = CopiesOf(pool, copies);
    int rep = 0;
    row.time_us = TimeUsGraph([&](cudaStream_t st) {
      cuda::PagedDecodeArgs b = a;
      const int c = rep++ % copies;
      if (c > 0) b.kv_pool = pools[c - 1].get();
      OC_OK(cuda::PagedDecode(b, st));
    }, kReps, 15);
    const double stream_us = TimeUs(run, 10, 15);
    char said[96];
    std::snprintf(said, sizeof(said), "graph-timed over %d pool copies; stream-launched %.1f us",
                  copies, stream_us);
    row.note += (row.note.empty() ? "" : "; ") + std::string(said);
    if (row.time_us < 0) row.time_us = stream_us;
    row.bytes = bytes;
  }
  Record(row);
}

// The automatic split choice against the numbers documented in paged_attention.h (Qwen3-8B heads,
// 132 SMs): a host-only row, the same on every machine.
void CheckDecodeSplitChoice() {
  struct Want {
    int seqs, ctx, fill, legacy;
  };
  const Want table[] = {{1, 1024, 32, 16}, {1, 4096, 64, 33}, {8, 1024, 9, 5},  {16, 1024, 5, 3},
                        {32, 1024, 3, 2},  {33, 1024, 1, 1},  {64, 4096, 1, 1}, {256, 1024, 1, 1},
                        {1, 40, 2, 1}};
  std::string got;
  bool pass = true;
  for (const Want& w : table) {
    const int fill = cuda::PagedDecodeChooseSplits(w.seqs, 32, 8, w.ctx, 132, Policy::kFill);
    const int legacy = cuda::PagedDecodeChooseSplits(w.seqs, 32, 8, w.ctx, 132, Policy::kLegacy);
    pass = pass && fill == w.fill && legacy == w.legacy;
    got += std::to_string(w.seqs) + "x" + std::to_string(w.ctx) + ":" + std::to_string(fill) + "/" +
           std::to_string(legacy) + " ";
  }
  // The mma kernel's (2 CTAs per SM), as paged_attention.h documents them.
  const Want mma_table[] = {{1, 1024, 16, 0}, {1, 4096, 33, 0}, {8, 1024, 4, 0}, {8, 16384, 4, 0},
                            {16, 1024, 2, 0}, {33, 1024, 1, 0}, {64, 4096, 1, 0}, {1, 40, 1, 0}};
  got += "mma:";
  for (const Want& w : mma_table) {
    const int mma = cuda::PagedDecodeChooseMmaSplits(w.seqs, 8, w.ctx, 132, 2);
    pass = pass && mma == w.fill;
    got += " " + std::to_string(w.seqs) + "x" + std::to_string(w.ctx) + ":" + std::to_string(mma);
  }
  Row row{"decode_splits", "h 32/8 132 SMs: fill/legacy, mma splits"};
  row.pass = pass;
  row.note = got;
  Record(row);
}

}  // namespace

void CheckPagedPrefill() {
  CheckWgmmaProbe();
  const Heads qwen3_8b{32, 8, 128};
  // The Hopper kernel takes rows of its own where it applies (an sm_90 device, a build with sm_90a
  // code); elsewhere kWgmma would run the automatic choice under its name.
  const cuda::DeviceLimits& dev = cuda::CurrentDeviceLimits();
  const bool hopper =
      cuda::detail::PagedPrefillWgmmaBuilt() && dev.cc_major == 9 && dev.cc_minor == 0;
  auto with_wgmma = [&](std::vector<PK> kernels) {
    if (hopper) kernels.insert(kernels.begin(), PK::kWgmma);
    return kernels;
  };
  // OPCHECK_PREFILL_TOKENS=N: only a fresh N-token prompt, the Hopper kernel and mma128 (a short
  // run for ncu, or for comparing variants chosen by the environment).
  if (const char* only = std::getenv("OPCHECK_PREFILL_TOKENS")) {
    PrefillCase(qwen3_8b, {0}, {std::atoi(only)}, {0}, true, with_wgmma({PK::kMma128}),
                std::atoi(only) > 4096 ? 512 : 0);
    return;
  }
  // A fresh prompt, a chunked prefill whose first 1536 tokens are cached (sharing 32 blocks with
  // sequence 0), and a short tail after a 4000-token prefix.
  if (!Small()) {
    PrefillCase(qwen3_8b, {0, 1536, 4000}, {1000, 2560, 95}, {0, 32, 0}, true,
                with_wgmma({PK::kMma128}));
    // Each kernel (kAuto picks kMma64 when 128-query tiles make fewer than two waves of CTAs).
    const std::vector<PK> all = with_wgmma({PK::kMma128, PK::kMma64, PK::kWmma});
    PrefillCase(qwen3_8b, {0}, {4096}, {0}, true, all);  // 4k prompt
    PrefillCase(qwen3_8b, {0}, {512}, {0}, true, all);
    PrefillCase(qwen3_8b, {0}, {2048}, {0}, true, all);  // the 2k prompt of the goal
    PrefillCase(qwen3_8b, {0}, {8192}, {0}, true, all, 512);  // 8k prompt
    // The same lengths after a cached prefix read straight from the pool (a later turn).
    const std::vector<PK> fast = with_wgmma({PK::kMma128, PK::kMma64});
    PrefillCase(qwen3_8b, {1536}, {512}, {0}, true, fast);
    PrefillCase(qwen3_8b, {2048}, {2048}, {0}, true, fast);
    PrefillCase(qwen3_8b, {4096}, {8192}, {0}, true, fast, 512);
  }
  // kAuto takes kMma64 for all of these (fewer CTAs than two waves): each variant named.
  PrefillCase({4, 2, 64}, {0, 100}, {37, 29}, {0, 2}, false,  // tiny-qwen3 heads
              {PK::kMma128, PK::kMma64, PK::kWmma});
  PrefillCase({8, 8, 128}, {0, 17, 300}, {1, 65, 3}, {0, 1, 1}, false,  // no GQA, odd sizes
              with_wgmma({PK::kMma128, PK::kMma64}));
  PrefillCase({28, 4, 128}, {7, 0}, {129, 200}, {0, 0}, false,
              with_wgmma({PK::kMma128}));  // group 7
  PrefillCase({8, 2, 128}, {7, 0}, {129, 200}, {0, 0}, false, with_wgmma({PK::kMma64}));  // group 4
  PrefillCase({4, 1, 64}, {0, 45}, {300, 130}, {0, 2}, false, {PK::kMma128});  // 3 query tiles
  PrefillCase({2, 1, 128}, {0, 90}, {200, 70}, {0, 3}, false, {PK::kAuto}, 50);  // checked rows
  if (hopper) {  // several key tiles, a prefix of 1-3 tiles, partial last tiles, 3+ query tiles
    PrefillCase({4, 1, 128}, {0, 45, 300}, {300, 130, 700}, {0, 2, 5}, false, {PK::kWgmma});
  }
}

// OPCHECK_DECODE_TIMED="1x4096,64x4096": only these timed shapes (each kernel), nothing else of
// the decode group (a short run for ncu); unset: every check.
std::vector<std::pair<int, int>> TimedDecodeShapesFromEnv() {
  std::vector<std::pair<int, int>> shapes;
  const char* v = std::getenv("OPCHECK_DECODE_TIMED");
  for (const char* p = v; p != nullptr && *p != '\0';) {
    int seqs = 0, len = 0, used = 0;
    if (std::sscanf(p, "%dx%d%n", &seqs, &len, &used) != 2) break;
    shapes.emplace_back(seqs, len);
    p += used;
    if (*p == ',') ++p;
  }
  return shapes;
}

void CheckPagedDecode() {
  const Heads qwen3_8b{32, 8, 128};
  // Issue 22's kernels side by side: the SIMT kernel as the engine ran it before (legacy splits,
  // reduce kernel), the mma kernel merging its splits through the workspace (kMmaGlobalMerge, its
  // split choice uncapped) and kMma (a cluster merge on sm_90 with TANDEM_DECODE_CLUSTER=8|16).
  auto timed = [&](int seqs, int len) {
    for (DK k : {DK::kSimt, DK::kMmaGlobalMerge, DK::kMma}) {
      DecodeCase(qwen3_8b, std::vector<int>(seqs, len), std::vector<int>(seqs, 0), true, 0,
                 k == DK::kSimt ? Policy::kLegacy : Policy::kAuto, k);
    }
  };
  if (const auto only = TimedDecodeShapesFromEnv(); !only.empty()) {
    for (const auto& [seqs, len] : only) timed(seqs, len);
    return;
  }
  std::mt19937 rng(NextSeed());
  std::vector<int> ctx = {1, 2, 15, 16, 17, 511, 512, 513, 1024, 1025, 4095, 4096};
  while (ctx.size() < 64) ctx.push_back(std::uniform_int_distribution<int>(1, 4096)(rng));
  std::shuffle(ctx.begin(), ctx.end(), rng);
  std::vector<int> share(ctx.size(), 0);
  ctx[0] = std::max(ctx[0], 1100);
  for (size_t s = 1; s < ctx.size(); s += 3) share[s] = std::min(ctx[s] / kBlockSize, 8);
  if (!Small()) {
    DecodeCase(qwen3_8b, ctx, share, false);  // mixed contexts
    // Issue 22's shapes (batch 1/8/64/256 x 1k/4k/16k; 256 x 16k left out: its 17 GB pool does
    // not come back to the host for the reference), each kernel in the same process.
    const std::vector<std::pair<int, int>> shapes = {
        {1, 1024}, {1, 4096},  {1, 16384},  {8, 1024},   {8, 4096},  {8, 16384},
        {64, 1024}, {64, 4096}, {64, 16384}, {256, 1024}, {256, 4096}};
    for (const auto& [seqs, len] : shapes) timed(seqs, len);
    for (DK k : {DK::kSimt, DK::kMma}) {  // fixed splits (a graph's), mixed contexts
      DecodeCase(qwen3_8b, ctx, share, false, 33, Policy::kFill, k);
      DecodeCase(qwen3_8b, ctx, share, false, 33, Policy::kLegacy, k);
    }
  }
  CheckDecodeSplitChoice();
  // Fixed splits: the fill merge (last CTA) and the legacy reduce kernel (first: these are what a
  // 1-SM emulator would not reach through the automatic choice).
  // Each kernel (the mma one runs every shape here but head_dim 256 and group 32).
  // (kMma with TANDEM_DECODE_CLUSTER=16 on sm_90: the fixed splits of 2-16 here merge in a cluster,
  // kMmaGlobalMerge's through the workspace.)
  for (DK k : {DK::kSimt, DK::kMma, DK::kMmaPairLoads, DK::kMmaGlobalMerge}) {
    for (Policy pol : {Policy::kFill, Policy::kLegacy}) {
      DecodeCase({4, 2, 64}, {1100, 37, 600, 1, 17}, {0, 0, 2, 0, 1}, false, 7, pol, k);
      DecodeCase({8, 1, 128}, {300, 64, 65}, {0, 0, 0}, false, 256, pol, k);  // group 8, max splits
    }
    DecodeCase({32, 8, 128}, {300, 33, 700}, {0, 1, 0}, false, 40, Policy::kFill, k);  // Qwen3-8B
    DecodeCase({32, 8, 128}, {4096, 300, 1, 2000}, {0, 1, 0, 3}, false, 16, Policy::kFill, k);  // 16 splits
    DecodeCase({24, 4, 128}, {300, 1, 500}, {0, 0, 0}, false, 9, Policy::kFill, k);    // group 6
    DecodeCase({8, 4, 256}, {600, 3, 200}, {0, 0, 0}, false, 4, Policy::kFill, k);     // head_dim 256
    DecodeCase({32, 2, 128}, {700, 200, 1}, {0, 5, 0}, false, 5, Policy::kFill, k);    // group 16
    DecodeCase({32, 1, 128}, {700, 200, 1}, {0, 5, 0}, false, 5, Policy::kFill, k);    // group 32
    DecodeCase({4, 4, 64}, {90, 1, 17}, {0, 0, 1}, false, 3, Policy::kFill, k);        // group 1
    // The automatic choice (1 split on the emulator's 1 SM).
    DecodeCase({4, 2, 64}, {1100, 37, 600, 1, 17}, {0, 0, 2, 0, 1}, false, 0, Policy::kAuto, k);
    DecodeCase({32, 2, 128}, {2000, 513, 1}, {0, 10, 0}, false, 0, Policy::kAuto, k);  // group 16
    DecodeCase({8, 4, 256}, {1500, 3, 512}, {0, 0, 0}, false, 0, Policy::kAuto, k);    // head_dim 256
    DecodeCase({24, 4, 128}, {700, 1, 1536}, {0, 0, 0}, false, 0, Policy::kAuto, k);   // group 6
  }
}

}  // namespace tandem::opcheck
