// cuda_op_check "fp8" (continued): SwiGLU fused into the FP8 activation quantizer
// (cuda::SiluMulQuantizeFp8) against the two kernels it replaces, cuda::SiluMul then
// cuda::QuantizeFp8Activations (each checked against its CPU reference in its own rows): codes and
// scales bit for bit, per token and per 128-column group, gate and up as the halves of one gate_up
// row (stride 2 dim). On sm_90 also the projection through Fp8Linear with x_prequantized against
// the same call on the bf16 activation: y bit for bit (the same codes reach the same GEMM).
// Likewise RMSNorm fused with it (cuda::RmsNormQuantizeFp8) against cuda::RmsNorm /
// cuda::FusedAddRmsNorm then cuda::QuantizeFp8Activations: codes, scales and the updated residual
// bit for bit.
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/silu_mul.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

// Counts the bytes that differ between two device buffers of n bytes.
long DiffBytes(const void* a, const void* b, size_t n) {
  std::vector<unsigned char> ha(n), hb(n);
  OC_CUDA(cudaMemcpy(ha.data(), a, n, cudaMemcpyDeviceToHost));
  OC_CUDA(cudaMemcpy(hb.data(), b, n, cudaMemcpyDeviceToHost));
  long bad = 0;
  for (size_t i = 0; i < n; ++i) bad += ha[i] != hb[i];
  return bad;
}

void CheckOne(int m, int dim, bool groups, int gemm_n) {
  DevBuf<bf16> gate_up(static_cast<size_t>(m) * 2 * dim), act(static_cast<size_t>(m) * dim);
  FillUniform(gate_up.get(), gate_up.size(), NextSeed(), -6.0f, 6.0f);
  const size_t scratch_bytes = cuda::Fp8LinearScratchBytes(m, dim);
  DevBuf<char> fused(scratch_bytes), plain(scratch_bytes);
  OC_CUDA(cudaMemset(fused.get(), 0, scratch_bytes));
  OC_CUDA(cudaMemset(plain.get(), 0, scratch_bytes));
  cuda::SiluMulArgs sm;
  sm.gate = gate_up.get();
  sm.gate_stride = 2 * dim;
  sm.up = gate_up.get() + dim;
  sm.up_stride = 2 * dim;
  sm.out = act.get();
  sm.out_stride = dim;
  sm.num_tokens = m;
  sm.dim = dim;
  OC_OK(cuda::SiluMulQuantizeFp8(sm, groups, fused.get(), scratch_bytes, nullptr));
  OC_OK(cuda::SiluMul(sm, nullptr));
  // Fp8Gemm::Run's scratch: codes [m, dim], then (256-aligned) the default layout's scales.
  auto* codes = reinterpret_cast<uint8_t*>(plain.get());
  const size_t offset = (static_cast<size_t>(m) * dim + 255) / 256 * 256;
  OC_OK(cuda::QuantizeFp8Activations(act.get(), dim, m, dim, groups, cuda::Fp8GemmLayout{}, codes,
                                     reinterpret_cast<float*>(plain.get() + offset), nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  char text[128];
  std::snprintf(text, sizeof(text), "silu_mul+quant m %d dim %d %s", m, dim, groups ? "groups" : "tokens");
  Row row{"fp8_silu_quant", text};
  const long bad = DiffBytes(fused.get(), plain.get(), scratch_bytes);
  row.pass = bad == 0;
  row.note = std::to_string(bad) + " of " + std::to_string(scratch_bytes) + " scratch bytes differ from SiluMul + QuantizeFp8Activations";
  Record(row);
  if (gemm_n == 0) return;

  // The projection: per-channel or 128 x 128 block weights of random codes and scales.
  static DevBuf<char> workspace(size_t{32} << 20);
  auto gemm = cuda::Fp8Gemm::Create(workspace.get(), workspace.size());
  if (!gemm.ok()) return;  // not sm_90, or the emulator: the fp8_gemm rows say so
  const int kb4 = ((dim + 127) / 128 + 3) / 4 * 4;
  DevBuf<uint8_t> w(static_cast<size_t>(gemm_n) * dim);
  DevBuf<bf16> wf(static_cast<size_t>(gemm_n) * dim);
  FillUniform(wf.get(), wf.size(), NextSeed(), -1.0f, 1.0f);
  // Codes from a bf16 fill: quantize it as activations would (any valid codes do).
  DevBuf<float> wscale_tmp(static_cast<size_t>(gemm_n));
  OC_OK(cuda::QuantizeFp8Activations(wf.get(), dim, gemm_n, dim, false, cuda::Fp8GemmLayout{cuda::Fp8GemmLayout::ActScales::kRowMajor},
                                     w.get(), wscale_tmp.get(), nullptr));
  DevBuf<float> scale(groups ? static_cast<size_t>((gemm_n + 127) / 128) * kb4 : static_cast<size_t>(gemm_n));
  FillUniform(scale.get(), scale.size(), NextSeed(), 0.001f, 0.01f);
  DevBuf<bf16> y1(static_cast<size_t>(m) * gemm_n), y2(static_cast<size_t>(m) * gemm_n);
  cuda::Fp8LinearArgs a;
  a.x = act.get();
  a.ldx = dim;
  a.w.q = w.get();
  a.w.scale = scale.get();
  a.w.scaling = groups ? cuda::Fp8Scaling::kBlock128 : cuda::Fp8Scaling::kPerChannel;
  a.y = y1.get();
  a.ldy = gemm_n;
  a.m = m;
  a.n = gemm_n;
  a.k = dim;
  OC_OK(cuda::Fp8Linear(gemm->get(), a, plain.get(), scratch_bytes, nullptr));
  OC_OK(cuda::SiluMulQuantizeFp8(sm, groups, fused.get(), scratch_bytes, nullptr));
  a.x = nullptr;
  a.x_prequantized = true;
  a.y = y2.get();
  OC_OK(cuda::Fp8Linear(gemm->get(), a, fused.get(), scratch_bytes, nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  std::snprintf(text, sizeof(text), "prequantized gemm m %d n %d k %d %s", m, gemm_n, dim, groups ? "blk128" : "chan");
  Row g{"fp8_silu_quant", text};
  const long bad_y = DiffBytes(y1.get(), y2.get(), y1.size() * sizeof(bf16));
  g.pass = bad_y == 0;
  g.note = std::to_string(bad_y) + " bytes of y differ from Fp8Linear on the bf16 activation";
  Record(g);
}

void CheckNormOne(int m, int dim, bool fused, bool groups) {
  const size_t n = static_cast<size_t>(m) * dim;
  DevBuf<bf16> x(n), res(n), res_plain(n), y(n), w(static_cast<size_t>(dim));
  FillUniform(x.get(), n, NextSeed(), -4.0f, 4.0f);
  FillUniform(res.get(), n, NextSeed(), -4.0f, 4.0f);
  FillUniform(w.get(), w.size(), NextSeed(), 0.5f, 1.5f);
  OC_CUDA(cudaMemcpy(res_plain.get(), res.get(), n * sizeof(bf16), cudaMemcpyDeviceToDevice));
  const size_t scratch_bytes = cuda::Fp8LinearScratchBytes(m, dim);
  DevBuf<char> one(scratch_bytes), two(scratch_bytes);
  OC_CUDA(cudaMemset(one.get(), 0, scratch_bytes));
  OC_CUDA(cudaMemset(two.get(), 0, scratch_bytes));
  cuda::RmsNormArgs a;
  a.x = x.get();
  a.x_stride = dim;
  a.residual = fused ? res.get() : nullptr;
  a.res_stride = dim;
  a.weight = w.get();
  a.y = nullptr;  // not written
  a.y_stride = dim;
  a.num_rows = m;
  a.dim = dim;
  OC_OK(cuda::RmsNormQuantizeFp8(a, fused, groups, one.get(), scratch_bytes, nullptr));
  a.residual = fused ? res_plain.get() : nullptr;
  a.y = y.get();
  OC_OK(fused ? cuda::FusedAddRmsNorm(a, nullptr) : cuda::RmsNorm(a, nullptr));
  auto* codes = reinterpret_cast<uint8_t*>(two.get());
  const size_t offset = (n + 255) / 256 * 256;
  OC_OK(cuda::QuantizeFp8Activations(y.get(), dim, m, dim, groups, cuda::Fp8GemmLayout{}, codes,
                                     reinterpret_cast<float*>(two.get() + offset), nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  char text[128];
  std::snprintf(text, sizeof(text), "%s+quant m %d dim %d %s", fused ? "add_rms_norm" : "rms_norm", m, dim,
                groups ? "groups" : "tokens");
  Row row{"fp8_norm_quant", text};
  const long bad = DiffBytes(one.get(), two.get(), scratch_bytes);
  const long bad_res = fused ? DiffBytes(res.get(), res_plain.get(), n * sizeof(bf16)) : 0;
  row.pass = bad == 0 && bad_res == 0;
  row.note = std::to_string(bad) + " of " + std::to_string(scratch_bytes) + " scratch bytes and " +
             std::to_string(bad_res) + " residual bytes differ from " + (fused ? "FusedAddRmsNorm" : "RmsNorm") +
             " + QuantizeFp8Activations";
  Record(row);
}

}  // namespace

void CheckFp8SiluQuant() {
  for (bool fused : {true, false}) {
    CheckNormOne(3, 200, fused, true);   // a partial 128-column group; 64 threads for 25 chunks
    CheckNormOne(37, 640, fused, false);
    CheckNormOne(40, 2056, fused, true);  // 257 chunks: threads past the row's last chunk
    CheckNormOne(5, 12296, fused, false);  // 1537 chunks on 1024 threads: two passes for some
    CheckNormOne(4, 12296, fused, true);
  }
  CheckOne(3, 200, true, 0);     // a partial 128-column group
  CheckOne(5, 1000, false, 0);   // 1000 / 8 columns: a partial pass of the CTA
  CheckOne(3, 12296, false, 0);  // per token: 2 chunks a thread in registers
  CheckOne(2, 24584, false, 0);  // 4 chunks a thread
  CheckOne(2, 20000, false, 0);  // 2500 chunks: 4 a thread, the last ones partial
  CheckOne(2, 40000, false, 0);  // past 4096 chunks: v computed again in the second pass
  CheckOne(40, 640, true, 384);
  CheckOne(37, 640, false, 384);
  if (Small()) return;
  CheckOne(2048, 12288, false, 4096);  // Qwen3-8B's down projection input at a 2k prefill
  CheckOne(256, 12288, true, 4096);
  for (bool groups : {false, true}) {
    CheckNormOne(2048, 4096, true, groups);  // Qwen3-8B's qkv / gate_up input at a 2k prefill
    CheckNormOne(256, 4096, false, groups);
  }
}

}  // namespace tandem::opcheck
