// cuda_op_check: embedding, RMSNorm (+ fused residual add), q/k norm + RoPE, SiLU-and-mul,
// reshape_and_cache, and the fused q/k norm + RoPE + cache write against the CPU ops on the same
// bf16-rounded inputs.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/reshape_and_cache.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/silu_mul.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/qk_norm_rope.h"
#include "kernels/cuda/reshape_and_cache.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/silu_mul.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

// bf16 outputs of elementwise ops: one final rounding (2^-9 relative) plus intermediate ones.
constexpr double kTolElementwise = 1e-2;

std::string Shape(const char* fmt_str, int a, int b, int c = 0, int d = 0) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), fmt_str, a, b, c, d);
  return buf;
}

// Rows [num_rows, dim] out of a strided host copy.
std::vector<float> Rows(const std::vector<float>& v, int num_rows, int dim, int64_t stride,
                        int64_t offset = 0) {
  std::vector<float> out(static_cast<size_t>(num_rows) * dim);
  for (int r = 0; r < num_rows; ++r) {
    std::copy_n(v.begin() + offset + r * stride, dim, out.begin() + static_cast<size_t>(r) * dim);
  }
  return out;
}

void EmbeddingCase(int vocab, int dim, int num_tokens) {
  DevBuf<bf16> table(static_cast<size_t>(vocab) * dim), out(static_cast<size_t>(num_tokens) * dim);
  FillUniform(table.get(), table.size(), NextSeed(), -1.0f, 1.0f);
  std::mt19937 rng(NextSeed());
  std::vector<int32_t> ids(num_tokens);
  for (int32_t& id : ids) id = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
  ids[0] = vocab - 1;
  if (num_tokens > 1) ids[1] = 0;
  DevBuf<int32_t> d_ids(num_tokens);
  d_ids.Upload(ids);
  out.Poison();
  auto run = [&] { OC_OK(cuda::Embedding(d_ids.get(), num_tokens, table.get(), vocab, dim, out.get(), nullptr)); };
  run();
  OC_CUDA(cudaDeviceSynchronize());
  // Reference over a compact table of the referenced rows (the full fp32 table can be 2.5 GB).
  std::map<int32_t, int32_t> compact_of;
  for (int32_t id : ids) compact_of.emplace(id, 0);
  std::vector<float> compact(compact_of.size() * dim);
  int32_t next = 0;
  for (auto& [id, c] : compact_of) {
    c = next++;
    const auto row = DownloadFloat(table.get() + static_cast<int64_t>(id) * dim, dim);
    std::copy(row.begin(), row.end(), compact.begin() + static_cast<size_t>(c) * dim);
  }
  std::vector<int32_t> compact_ids(num_tokens);
  for (int i = 0; i < num_tokens; ++i) compact_ids[i] = compact_of[ids[i]];
  std::vector<float> ref(out.size());
  cpu::Embedding(compact_ids.data(), num_tokens, compact.data(), dim, ref.data());
  Row row{"embedding", Shape("vocab %d dim %d tokens %d", vocab, dim, num_tokens)};
  row.err = Compare(DownloadFloat(out), ref);
  row.tol = 0;
  row.pass = row.err.non_finite == 0 && row.err.max_abs == 0;
  row.time_us = TimeUs(run);
  row.bytes = 2.0 * num_tokens * dim * sizeof(bf16);
  Record(row);
}

void RmsNormCase(int num_rows, int dim, int64_t x_stride, bool fused, bool in_place) {
  const float eps = 1e-6f;
  DevBuf<bf16> x(num_rows * x_stride), residual(static_cast<size_t>(num_rows) * dim), w(dim);
  DevBuf<bf16> y_buf(in_place ? 0 : static_cast<size_t>(num_rows) * dim);
  FillUniform(x.get(), x.size(), NextSeed(), -2.0f, 2.0f);
  FillUniform(residual.get(), residual.size(), NextSeed(), -2.0f, 2.0f);
  FillUniform(w.get(), w.size(), NextSeed(), 0.5f, 1.5f);
  const auto xf = Rows(DownloadFloat(x), num_rows, dim, x_stride);
  const auto rf = DownloadFloat(residual);
  const auto wf = DownloadFloat(w);
  if (!in_place) y_buf.Poison();
  cuda::RmsNormArgs a;
  a.x = x.get();
  a.x_stride = x_stride;
  a.residual = fused ? residual.get() : nullptr;
  a.res_stride = dim;
  a.weight = w.get();
  a.y = in_place ? x.get() : y_buf.get();
  a.y_stride = in_place ? x_stride : dim;
  a.num_rows = num_rows;
  a.dim = dim;
  a.eps = eps;
  auto run = [&] { OC_OK(fused ? cuda::FusedAddRmsNorm(a, nullptr) : cuda::RmsNorm(a, nullptr)); };
  run();
  OC_CUDA(cudaDeviceSynchronize());
  std::vector<float> z = xf;  // the normalized input: x, or x + residual
  if (fused) {
    for (size_t i = 0; i < z.size(); ++i) z[i] += rf[i];
  }
  std::vector<float> ref(z.size());
  cpu::RmsNorm(z.data(), wf.data(), num_rows, dim, eps, ref.data());
  const auto y = in_place ? Rows(DownloadFloat(x), num_rows, dim, x_stride)
                          : DownloadFloat(y_buf);
  Row row{fused ? "fused_add_rmsnorm" : "rms_norm",
          Shape("rows %d dim %d x_stride %d", num_rows, dim, static_cast<int>(x_stride)) +
              (in_place ? " in place" : "")};
  row.err = Compare(y, ref);
  row.tol = kTolElementwise;
  row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol;
  if (fused) {  // the residual output too
    const ErrorStats r = Compare(DownloadFloat(residual), z);
    char buf[96];
    std::snprintf(buf, sizeof(buf), "residual rel %.2e max %.2e", r.rel, r.max_abs);
    row.note = buf;
    row.pass = row.pass && r.non_finite == 0 && r.rel <= row.tol;
  }
  if (!in_place) {
    row.time_us = TimeUs(run);
    row.bytes = (fused ? 4.0 : 2.0) * num_rows * dim * sizeof(bf16);
  }
  Record(row);
}

void QkNormRopeCase(int num_tokens, int nh, int nkv, int hd, const cpu::RopeParams& rope,
                    bool with_norm, const char* label) {
  const float eps = 1e-6f;
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * hd;  // a fused qkv buffer
  DevBuf<bf16> qkv(num_tokens * stride), q_norm(hd), k_norm(hd);
  FillUniform(qkv.get(), qkv.size(), NextSeed(), -2.0f, 2.0f);
  FillUniform(q_norm.get(), hd, NextSeed(), 0.5f, 1.5f);
  FillUniform(k_norm.get(), hd, NextSeed(), 0.5f, 1.5f);
  std::mt19937 rng(NextSeed());
  std::vector<int32_t> positions(num_tokens);
  for (int32_t& p : positions) p = std::uniform_int_distribution<int>(0, 40959)(rng);
  positions[0] = 0;
  if (num_tokens > 1) positions[1] = 40959;
  const std::vector<float> inv_freq = cpu::RopeInvFreq(hd, rope);
  DevBuf<int32_t> d_pos(num_tokens);
  d_pos.Upload(positions);
  DevBuf<float> d_inv(inv_freq.size());
  d_inv.Upload(inv_freq);
  const auto before = DownloadFloat(qkv);
  cuda::QkNormRopeArgs a;
  a.q = qkv.get();
  a.q_stride = stride;
  a.k = qkv.get() + static_cast<int64_t>(nh) * hd;
  a.k_stride = stride;
  a.q_norm = with_norm ? q_norm.get() : nullptr;
  a.k_norm = with_norm ? k_norm.get() : nullptr;
  a.positions = d_pos.get();
  a.inv_freq = d_inv.get();
  a.num_tokens = num_tokens;
  a.num_heads = nh;
  a.num_kv_heads = nkv;
  a.head_dim = hd;
  a.eps = eps;
  auto run = [&] { OC_OK(cuda::QkNormRope(a, nullptr)); };
  run();
  OC_CUDA(cudaDeviceSynchronize());
  const auto after = DownloadFloat(qkv);
  auto q_ref = Rows(before, num_tokens, nh * hd, stride);
  auto k_ref = Rows(before, num_tokens, nkv * hd, stride, int64_t{nh} * hd);
  if (with_norm) {
    const auto qw = DownloadFloat(q_norm), kw = DownloadFloat(k_norm);
    cpu::RmsNorm(q_ref.data(), qw.data(), num_tokens * nh, hd, eps, q_ref.data());
    cpu::RmsNorm(k_ref.data(), kw.data(), num_tokens * nkv, hd, eps, k_ref.data());
  }
  cpu::ApplyRope(q_ref.data(), num_tokens, nh, hd, positions.data(), inv_freq.data());
  cpu::ApplyRope(k_ref.data(), num_tokens, nkv, hd, positions.data(), inv_freq.data());
  std::vector<float> out = Rows(after, num_tokens, nh * hd, stride);
  const auto k_out = Rows(after, num_tokens, nkv * hd, stride, int64_t{nh} * hd);
  out.insert(out.end(), k_out.begin(), k_out.end());
  q_ref.insert(q_ref.end(), k_ref.begin(), k_ref.end());
  Row row{"qk_norm_rope", Shape("T %d heads %d/%d hd %d ", num_tokens, nh, nkv, hd) + label};
  row.err = Compare(out, q_ref);
  row.tol = kTolElementwise;
  // v (the rest of each row) must be untouched.
  const auto v_before = Rows(before, num_tokens, nkv * hd, stride, int64_t{nh + nkv} * hd);
  const auto v_after = Rows(after, num_tokens, nkv * hd, stride, int64_t{nh + nkv} * hd);
  const bool v_same = v_before == v_after;
  if (!v_same) row.note = "v slice modified";
  row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol && v_same;
  row.time_us = TimeUs(run);
  row.bytes = 2.0 * num_tokens * (nh + nkv) * hd * sizeof(bf16);
  Record(row);
}

// QkNormRopeCache (q/k norm + RoPE + the K/V cache write in one kernel) against the CPU ops
// composed (RmsNorm, ApplyRope, ReshapeAndCache) with the tolerances of the unfused checks: q and
// the cached K rows within kTolElementwise, the cached V rows and every untouched pool slot exact;
// the k and v slices of qkv untouched. Also bit for bit against the GPU's unfused pair
// (QkNormRope, then ReshapeAndCache) on copies, whose time is in the note.
void QkNormRopeCacheCase(int num_tokens, int nh, int nkv, int hd, int num_blocks,
                         const cpu::RopeParams& rope, bool with_norm, const char* label) {
  const float eps = 1e-6f;
  const int block_size = 16;
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * hd;
  const int64_t row_elems = static_cast<int64_t>(nkv) * hd;
  const size_t pool_elems = static_cast<size_t>(num_blocks) * 2 * block_size * row_elems;
  DevBuf<bf16> qkv(num_tokens * stride), q_norm(hd), k_norm(hd), pool(pool_elems);
  DevBuf<bf16> qkv2(qkv.size()), pool2(pool_elems);  // the unfused pair's copies
  FillUniform(qkv.get(), qkv.size(), NextSeed(), -2.0f, 2.0f);
  FillUniform(q_norm.get(), hd, NextSeed(), 0.5f, 1.5f);
  FillUniform(k_norm.get(), hd, NextSeed(), 0.5f, 1.5f);
  FillUniform(pool.get(), pool_elems, NextSeed(), -1.0f, 1.0f);
  OC_CUDA(cudaMemcpy(qkv2.get(), qkv.get(), qkv.bytes(), cudaMemcpyDeviceToDevice));
  OC_CUDA(cudaMemcpy(pool2.get(), pool.get(), pool.bytes(), cudaMemcpyDeviceToDevice));
  std::mt19937 rng(NextSeed());
  std::vector<int32_t> positions(num_tokens);
  for (int32_t& p : positions) p = std::uniform_int_distribution<int>(0, 40959)(rng);
  if (num_tokens > 1) positions[0] = 0;
  std::vector<int64_t> slots(static_cast<size_t>(num_blocks) * block_size);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(num_tokens);
  for (int t = 3; t < num_tokens; t += 7) slots[t] = -1;  // padding tokens: no KV write
  const std::vector<float> inv_freq = cpu::RopeInvFreq(hd, rope);
  DevBuf<int32_t> d_pos(num_tokens);
  d_pos.Upload(positions);
  DevBuf<int64_t> d_slots(num_tokens);
  d_slots.Upload(slots);
  DevBuf<float> d_inv(inv_freq.size());
  d_inv.Upload(inv_freq);
  const auto before = DownloadFloat(qkv);
  std::vector<float> pool_ref = DownloadFloat(pool);

  auto rope_args = [&](bf16* base) {
    cuda::QkNormRopeArgs a;
    a.q = base;
    a.q_stride = stride;
    a.k = base + static_cast<int64_t>(nh) * hd;
    a.k_stride = stride;
    a.q_norm = with_norm ? q_norm.get() : nullptr;
    a.k_norm = with_norm ? k_norm.get() : nullptr;
    a.positions = d_pos.get();
    a.inv_freq = d_inv.get();
    a.num_tokens = num_tokens;
    a.num_heads = nh;
    a.num_kv_heads = nkv;
    a.head_dim = hd;
    a.eps = eps;
    return a;
  };
  cuda::QkNormRopeCacheArgs f;
  f.rope = rope_args(qkv.get());
  f.v = qkv.get() + int64_t{nh + nkv} * hd;
  f.v_stride = stride;
  f.slot_mapping = d_slots.get();
  f.kv_pool = pool.get();
  f.block_size = block_size;
  const cuda::QkNormRopeArgs u = rope_args(qkv2.get());
  cuda::ReshapeAndCacheArgs rc;
  rc.k = qkv2.get() + int64_t{nh} * hd;
  rc.k_stride = stride;
  rc.v = qkv2.get() + int64_t{nh + nkv} * hd;
  rc.v_stride = stride;
  rc.slot_mapping = d_slots.get();
  rc.kv_pool = pool2.get();
  rc.num_tokens = num_tokens;
  rc.block_size = block_size;
  rc.num_kv_heads = nkv;
  rc.head_dim = hd;
  auto fused = [&] { OC_OK(cuda::QkNormRopeCache(f, nullptr)); };
  auto unfused = [&] {
    OC_OK(cuda::QkNormRope(u, nullptr));
    OC_OK(cuda::ReshapeAndCache(rc, nullptr));
  };
  fused();
  unfused();
  OC_CUDA(cudaDeviceSynchronize());
  const auto after = DownloadFloat(qkv);
  const auto pool_out = DownloadFloat(pool);

  // CPU reference: the ops composed.
  auto q_ref = Rows(before, num_tokens, nh * hd, stride);
  auto k_ref = Rows(before, num_tokens, nkv * hd, stride, int64_t{nh} * hd);
  const auto v_in = Rows(before, num_tokens, nkv * hd, stride, int64_t{nh + nkv} * hd);
  if (with_norm) {
    const auto qw = DownloadFloat(q_norm), kw = DownloadFloat(k_norm);
    cpu::RmsNorm(q_ref.data(), qw.data(), num_tokens * nh, hd, eps, q_ref.data());
    cpu::RmsNorm(k_ref.data(), kw.data(), num_tokens * nkv, hd, eps, k_ref.data());
  }
  cpu::ApplyRope(q_ref.data(), num_tokens, nh, hd, positions.data(), inv_freq.data());
  cpu::ApplyRope(k_ref.data(), num_tokens, nkv, hd, positions.data(), inv_freq.data());
  std::vector<float> kk, vv, k_out;
  std::vector<int64_t> valid;
  for (int t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    kk.insert(kk.end(), k_ref.begin() + t * row_elems, k_ref.begin() + (t + 1) * row_elems);
    vv.insert(vv.end(), v_in.begin() + t * row_elems, v_in.begin() + (t + 1) * row_elems);
    valid.push_back(slots[t]);
  }
  cpu::ReshapeAndCache(kk.data(), vv.data(), static_cast<int>(valid.size()), valid.data(),
                       block_size, nkv, hd, pool_ref.data());
  // Split the pool: the cached K rows (computed) against everything else (copied or untouched).
  std::vector<char> is_k(pool_elems, 0);
  for (int64_t slot : valid) {
    const size_t at = (static_cast<size_t>(slot / block_size) * 2 * block_size + slot % block_size) *
                      row_elems;
    std::fill_n(is_k.begin() + at, row_elems, 1);
    k_out.insert(k_out.end(), pool_out.begin() + at, pool_out.begin() + at + row_elems);
  }
  bool rest_exact = true;
  for (size_t i = 0; i < pool_elems; ++i) {
    if (!is_k[i] && std::memcmp(&pool_out[i], &pool_ref[i], sizeof(float)) != 0) rest_exact = false;
  }
  std::vector<float> out = Rows(after, num_tokens, nh * hd, stride);
  out.insert(out.end(), k_out.begin(), k_out.end());
  q_ref.insert(q_ref.end(), kk.begin(), kk.end());
  const int64_t kv_off = int64_t{nh} * hd;
  const bool kv_same = Rows(before, num_tokens, 2 * nkv * hd, stride, kv_off) ==
                       Rows(after, num_tokens, 2 * nkv * hd, stride, kv_off);
  // The unfused GPU pair: q and the pool bit for bit.
  const auto q_bits = qkv.Download(), q2_bits = qkv2.Download();
  bool q_bits_same = true;
  for (int t = 0; t < num_tokens; ++t) {
    q_bits_same = q_bits_same && std::memcmp(q_bits.data() + t * stride, q2_bits.data() + t * stride,
                                             sizeof(bf16) * nh * hd) == 0;
  }
  const auto p_bits = pool.Download(), p2_bits = pool2.Download();
  const bool pool_bits_same = std::memcmp(p_bits.data(), p2_bits.data(), pool.bytes()) == 0;

  Row row{"qk_norm_rope_cache", Shape("T %d heads %d/%d hd %d ", num_tokens, nh, nkv, hd) + label};
  row.err = Compare(out, q_ref);
  row.tol = kTolElementwise;
  row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol && rest_exact && kv_same &&
             q_bits_same && pool_bits_same;
  if (!rest_exact) row.note += "pool V/untouched slots differ; ";
  if (!kv_same) row.note += "k/v slice of qkv modified; ";
  if (!q_bits_same || !pool_bits_same) row.note += "differs from the unfused GPU pair; ";
  row.time_us = TimeUs(fused);
  row.bytes = 2.0 * num_tokens * (nh + 2 * nkv) * hd * sizeof(bf16);
  if (row.time_us > 0) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "unfused pair %.1f us", TimeUs(unfused));
    row.note += buf;
  }
  Record(row);
}

void SiluMulCase(int num_tokens, int dim) {
  DevBuf<bf16> gate_up(static_cast<size_t>(num_tokens) * 2 * dim), out(static_cast<size_t>(num_tokens) * dim);
  FillUniform(gate_up.get(), gate_up.size(), NextSeed(), -6.0f, 6.0f);
  out.Poison();
  cuda::SiluMulArgs a;
  a.gate = gate_up.get();
  a.gate_stride = 2 * dim;
  a.up = gate_up.get() + dim;
  a.up_stride = 2 * dim;
  a.out = out.get();
  a.out_stride = dim;
  a.num_tokens = num_tokens;
  a.dim = dim;
  auto run = [&] { OC_OK(cuda::SiluMul(a, nullptr)); };
  run();
  OC_CUDA(cudaDeviceSynchronize());
  const auto gu = DownloadFloat(gate_up);
  const auto g = Rows(gu, num_tokens, dim, 2 * dim), u = Rows(gu, num_tokens, dim, 2 * dim, dim);
  std::vector<float> ref(g.size());
  cpu::SiluMul(g.data(), u.data(), static_cast<long>(g.size()), ref.data());
  Row row{"silu_mul", Shape("T %d dim %d (gate_up [T, 2 dim])", num_tokens, dim)};
  row.err = Compare(DownloadFloat(out), ref);
  row.tol = kTolElementwise;
  row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol;
  row.time_us = TimeUs(run);
  row.bytes = 3.0 * num_tokens * dim * sizeof(bf16);
  Record(row);
}

void ReshapeAndCacheCase(int num_tokens, int nh, int nkv, int hd, int block_size, int num_blocks) {
  const int64_t stride = static_cast<int64_t>(nh + 2 * nkv) * hd;
  const int64_t row_elems = static_cast<int64_t>(nkv) * hd;
  DevBuf<bf16> qkv(num_tokens * stride), pool(static_cast<size_t>(num_blocks) * 2 * block_size * row_elems);
  FillUniform(qkv.get(), qkv.size(), NextSeed(), -1.0f, 1.0f);
  FillUniform(pool.get(), pool.size(), NextSeed(), -1.0f, 1.0f);
  std::mt19937 rng(NextSeed());
  std::vector<int64_t> all_slots(static_cast<size_t>(num_blocks) * block_size);
  std::iota(all_slots.begin(), all_slots.end(), 0);
  std::shuffle(all_slots.begin(), all_slots.end(), rng);
  std::vector<int64_t> slots(all_slots.begin(), all_slots.begin() + num_tokens);
  for (int t = 5; t < num_tokens; t += 17) slots[t] = -1;  // padding tokens are skipped
  DevBuf<int64_t> d_slots(num_tokens);
  d_slots.Upload(slots);
  const auto qkv_f = DownloadFloat(qkv);
  std::vector<float> ref = DownloadFloat(pool);
  cuda::ReshapeAndCacheArgs a;
  a.k = qkv.get() + int64_t{nh} * hd;
  a.k_stride = stride;
  a.v = qkv.get() + int64_t{nh + nkv} * hd;
  a.v_stride = stride;
  a.slot_mapping = d_slots.get();
  a.kv_pool = pool.get();
  a.num_tokens = num_tokens;
  a.block_size = block_size;
  a.num_kv_heads = nkv;
  a.head_dim = hd;
  auto run = [&] { OC_OK(cuda::ReshapeAndCache(a, nullptr)); };
  run();
  OC_CUDA(cudaDeviceSynchronize());
  // Reference: the CPU op over the non-padding tokens, on the pool as it was.
  const auto k = Rows(qkv_f, num_tokens, nkv * hd, stride, int64_t{nh} * hd);
  const auto v = Rows(qkv_f, num_tokens, nkv * hd, stride, int64_t{nh + nkv} * hd);
  std::vector<float> kk, vv;
  std::vector<int64_t> valid_slots;
  for (int t = 0; t < num_tokens; ++t) {
    if (slots[t] < 0) continue;
    kk.insert(kk.end(), k.begin() + t * row_elems, k.begin() + (t + 1) * row_elems);
    vv.insert(vv.end(), v.begin() + t * row_elems, v.begin() + (t + 1) * row_elems);
    valid_slots.push_back(slots[t]);
  }
  cpu::ReshapeAndCache(kk.data(), vv.data(), static_cast<int>(valid_slots.size()), valid_slots.data(),
                       block_size, nkv, hd, ref.data());
  Row row{"reshape_and_cache", Shape("T %d kv_heads %d hd %d blocks %d", num_tokens, nkv, hd, num_blocks)};
  row.err = Compare(DownloadFloat(pool), ref);  // the whole pool: written slots and untouched ones
  row.tol = 0;
  row.pass = row.err.non_finite == 0 && row.err.max_abs == 0;
  row.time_us = TimeUs(run);
  row.bytes = 4.0 * valid_slots.size() * row_elems * sizeof(bf16);
  Record(row);
}

}  // namespace

void CheckEmbedding() {
  if (!Small()) {
    EmbeddingCase(151936, 4096, 2048);  // Qwen3-8B
    EmbeddingCase(151936, 4096, 1);
  }
  EmbeddingCase(1000, 100, 37);       // odd: scalar path
}

void CheckRmsNorm() {
  for (bool fused : {false, true}) {
    if (!Small()) RmsNormCase(2048, 4096, 4096, fused, false);  // Qwen3-8B hidden
    RmsNormCase(1, 4096, 4096, fused, false);
    RmsNormCase(7, 1000, 1008, fused, false);     // strided rows
    RmsNormCase(5, 999, 1003, fused, false);      // odd: scalar path
    RmsNormCase(64, 4096, 4096, fused, true);     // y aliases x
  }
}

void CheckQkNormRope() {
  cpu::RopeParams qwen3;  // Qwen3-8B: theta 1e6, default rope
  qwen3.theta = 1000000.0;
  if (!Small()) QkNormRopeCase(2048, 32, 8, 128, qwen3, true, "qwen3 default");
  QkNormRopeCase(1, 32, 8, 128, qwen3, true, "qwen3 default");
  cpu::RopeParams llama3;
  llama3.theta = 500000.0;
  llama3.type = "llama3";
  llama3.factor = 8.0;
  llama3.low_freq_factor = 1.0;
  llama3.high_freq_factor = 4.0;
  llama3.original_max_position_embeddings = 8192;
  QkNormRopeCase(333, 32, 8, 128, llama3, false, "llama3, no norm");
  cpu::RopeParams linear;
  linear.theta = 10000.0;
  linear.type = "linear";
  linear.factor = 4.0;
  QkNormRopeCase(37, 4, 2, 64, linear, true, "linear x4");
  QkNormRopeCase(19, 6, 2, 96, qwen3, true, "hd 96");
  QkNormRopeCase(11, 8, 4, 256, qwen3, true, "hd 256");
  // The fused kernel (the runner's layer loop): decode and prefill shapes, padding slots.
  if (!Small()) QkNormRopeCacheCase(2048, 32, 8, 128, 1024, qwen3, true, "qwen3 prefill");
  QkNormRopeCacheCase(1, 32, 8, 128, 64, qwen3, true, "qwen3 decode");
  QkNormRopeCacheCase(8, 32, 8, 128, 64, qwen3, true, "qwen3 decode x8");
  QkNormRopeCacheCase(37, 4, 2, 64, 11, linear, true, "linear x4");
  // >= 128 tokens: the vectorized kernel's warps take several groups of heads each.
  QkNormRopeCacheCase(150, 32, 8, 128, 12, qwen3, true, "qwen3 prefill 150");
  QkNormRopeCacheCase(131, 6, 2, 256, 9, qwen3, true, "hd 256 x131");
  QkNormRopeCacheCase(19, 6, 2, 96, 5, llama3, false, "hd 96, no norm");
}

void CheckSiluMul() {
  if (!Small()) SiluMulCase(2048, 12288);  // Qwen3-8B intermediate
  SiluMulCase(1, 12288);
  SiluMulCase(5, 1001);      // odd: scalar path
}

void CheckReshapeAndCache() {
  if (!Small()) ReshapeAndCacheCase(2048, 32, 8, 128, 16, 1024);  // Qwen3-8B
  ReshapeAndCacheCase(37, 4, 2, 64, 16, 11);
  ReshapeAndCacheCase(13, 3, 1, 36, 16, 5);         // odd: scalar path (row of 36)
}

}  // namespace tandem::opcheck
