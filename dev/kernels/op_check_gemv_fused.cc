// cuda_op_check "linear", fused rows: the GEMV with a decoder layer's small kernels inside it
// (GemvFusion, gemv.h) against the kernels it replaces, run separately on the same inputs. The
// contract is bitwise equality (the CUDA runner's fused decode step must give the same tokens):
// - norm:  LinearGemvFused(x, norm_weight)  vs  RmsNorm(x) -> xn, LinearGemv(xn)
// - silu:  LinearGemvFused(gate, up)         vs  SiluMul(gate, up) -> act, LinearGemv(act)
// - +acc:  y = bf16(bf16(x W^T) + y)          vs  LinearGemv -> h, FusedAddRmsNorm(h, residual = y)
// each at the same k split, every output element compared (and the padding of y left untouched).
// The unfused path itself is checked against the CPU by the other linear rows; here the fused
// output is also compared with cpu::Linear over the unfused path's transformed x.
// Timed (not --small): Qwen3-8B's fused shapes at m = 1, 2, 4, 8, W rotated out of L2 as in
// op_check_linear.cc, the fused kernel against the separate kernels, both captured in a CUDA graph
// (as the engine runs them): the note gives the ratio.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/matmul.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/silu_mul.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

enum class Pro { kNone, kNorm, kSilu };

struct FusedShape {
  const char* label;
  int n, k;
  Pro pro;
  bool accumulate;
  bool bias = false;
  int ldy_pad = 0;
};

std::vector<uint16_t> Bits16(const bf16* p, size_t n) {
  std::vector<uint16_t> v(n);
  OC_CUDA(cudaMemcpy(v.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return v;
}

// Inputs of one shape for up to max_m rows; W in `copies` identical buffers (timing).
struct FusedFixture {
  FusedFixture(const FusedShape& s, int max_m, int copies)
      : s(s), ldx(s.pro == Pro::kSilu ? 2 * s.k : s.k), ldy(s.n + s.ldy_pad) {
    // x: activations of a residual stream (norm) or gate_up rows [gate | up] (silu).
    x = DevBuf<bf16>(static_cast<size_t>(max_m) * ldx);
    FillUniform(x.get(), x.size(), NextSeed(), -3.0f, 3.0f);
    norm_w = DevBuf<bf16>(std::max(s.n, s.k));  // also the unfused residual add's norm (dim n)
    FillUniform(norm_w.get(), norm_w.size(), NextSeed(), 0.5f, 1.5f);
    w.emplace_back(static_cast<size_t>(s.n) * s.k);
    FillUniform(w[0].get(), w[0].size(), NextSeed(), -0.05f, 0.05f);
    for (int c = 1; c < copies; ++c) {
      w.emplace_back(w[0].size());
      OC_CUDA(cudaMemcpy(w[c].get(), w[0].get(), w[0].bytes(), cudaMemcpyDeviceToDevice));
    }
    if (s.bias) {
      b = DevBuf<bf16>(s.n);
      FillUniform(b.get(), s.n, NextSeed(), -1.0f, 1.0f);
    }
    const size_t ysize = static_cast<size_t>(max_m) * ldy;
    y0 = DevBuf<bf16>(ysize);  // the residual stream before the add
    FillUniform(y0.get(), ysize, NextSeed(), -4.0f, 4.0f);
    y = DevBuf<bf16>(ysize);
    y_ref = DevBuf<bf16>(ysize);
    h = DevBuf<bf16>(ysize);
    xt = DevBuf<bf16>(static_cast<size_t>(max_m) * s.k);
    norm_out = DevBuf<bf16>(ysize);
  }

  cuda::GemvFusion Fusion() const {
    cuda::GemvFusion f;
    if (s.pro == Pro::kNorm) f.norm_weight = norm_w.get();
    if (s.pro == Pro::kSilu) f.up = x.get() + s.k;
    f.norm_eps = 1e-6f;
    f.accumulate = s.accumulate;
    return f;
  }

  cuda::LinearArgs Args(const bf16* in, int64_t ld, void* out, int m, int copy) const {
    cuda::LinearArgs a;
    a.x = in;
    a.ldx = ld;
    a.w = w[copy].get();
    a.bias = s.bias ? b.get() : nullptr;
    a.y = out;
    a.ldy = ldy;
    a.m = m;
    a.n = s.n;
    a.k = s.k;
    a.programmatic_launch = true;  // as the runner launches them (the GEMV waits on the kernel before)
    return a;
  }

  // Resets y to the residual stream (the accumulating kernels add to it; padding included).
  void ResetY(cudaStream_t st) const {
    OC_CUDA(cudaMemcpyAsync(y.get(), y0.get(), y0.bytes(), cudaMemcpyDeviceToDevice, st));
  }

  Status Fused(int m, int ks, int copy, cudaStream_t st) const {
    return cuda::LinearGemvFused(Args(x.get(), ldx, y.get(), m, copy), Fusion(), ks, st);
  }

  // The separate kernels into y_ref (the transformed x in xt, the product in h when accumulating).
  Status Unfused(int m, int ks, int copy, cudaStream_t st) const {
    const bf16* in = x.get();
    int64_t ld = ldx;
    if (s.pro == Pro::kNorm) {
      cuda::RmsNormArgs a;
      a.x = x.get();
      a.x_stride = ldx;
      a.weight = norm_w.get();
      a.y = xt.get();
      a.y_stride = s.k;
      a.num_rows = m;
      a.dim = s.k;
      a.eps = 1e-6f;
      TANDEM_RETURN_IF_ERROR(cuda::RmsNorm(a, st));
      in = xt.get();
      ld = s.k;
    } else if (s.pro == Pro::kSilu) {
      cuda::SiluMulArgs a;
      a.gate = x.get();
      a.gate_stride = ldx;
      a.up = x.get() + s.k;
      a.up_stride = ldx;
      a.out = xt.get();
      a.out_stride = s.k;
      a.num_tokens = m;
      a.dim = s.k;
      TANDEM_RETURN_IF_ERROR(cuda::SiluMul(a, st));
      in = xt.get();
      ld = s.k;
    }
    if (!s.accumulate) return cuda::LinearGemv(Args(in, ld, y_ref.get(), m, copy), ks, st);
    TANDEM_RETURN_IF_ERROR(cuda::LinearGemv(Args(in, ld, h.get(), m, copy), ks, st));
    // residual = bf16(h + residual), as the runner's unfused layer adds it.
    cuda::RmsNormArgs a;
    a.x = h.get();
    a.x_stride = ldy;
    a.residual = y_ref.get();
    a.res_stride = ldy;
    a.weight = norm_w.get();  // the norm's output is not compared (its dim is n here)
    a.y = norm_out.get();
    a.y_stride = ldy;
    a.num_rows = m;
    a.dim = s.n;
    a.eps = 1e-6f;
    return cuda::FusedAddRmsNorm(a, st);
  }

  FusedShape s;
  int64_t ldx, ldy;
  DevBuf<bf16> x, norm_w, b, y0, y, y_ref, h, xt, norm_out;
  std::vector<DevBuf<bf16>> w;
};

std::string Text(const FusedShape& s, int m, int ks) {
  char text[160];
  std::snprintf(text, sizeof(text), "%s m %d n %d k %d%s%s%s%s gemv-fused ks%d", s.label, m, s.n,
                s.k, s.pro == Pro::kNorm ? " norm" : (s.pro == Pro::kSilu ? " silu*mul" : ""),
                s.accumulate ? " +residual" : "", s.bias ? " +bias" : "", s.ldy_pad ? " strided" : "",
                ks);
  return text;
}

// One fused launch against the separate kernels at split ks: bitwise over the whole y buffer,
// plus the relative error against cpu::Linear over the transformed x the separate kernels made.
Row CheckOne(FusedFixture& f, int m, int ks) {
  Row row{"linear", Text(f.s, m, ks)};
  if (f.s.accumulate) {
    f.ResetY(nullptr);
    OC_CUDA(cudaMemcpy(f.y_ref.get(), f.y0.get(), f.y0.bytes(), cudaMemcpyDeviceToDevice));
  } else {
    f.y.Poison();
    f.y_ref.Poison();
  }
  OC_OK(f.Fused(m, ks, 0, nullptr));
  OC_OK(f.Unfused(m, ks, 0, nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  const auto got = Bits16(f.y.get(), f.y.size());
  const auto want = Bits16(f.y_ref.get(), f.y_ref.size());
  long differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i] ? 1 : 0;
  // The CPU reference: cpu::Linear over the x the fused kernel should have formed.
  const int k = f.s.k, n = f.s.n;
  std::vector<float> xs(static_cast<size_t>(m) * k);
  if (f.s.pro == Pro::kNone) {
    const auto xv = DownloadFloat(f.x.get(), static_cast<size_t>(m) * f.ldx);
    for (int i = 0; i < m; ++i) std::copy_n(xv.begin() + i * f.ldx, k, xs.begin() + static_cast<size_t>(i) * k);
  } else {
    xs = DownloadFloat(f.xt.get(), xs.size());
  }
  const auto wf = DownloadFloat(f.w[0]);
  const auto bf = f.s.bias ? DownloadFloat(f.b) : std::vector<float>{};
  std::vector<float> ref(static_cast<size_t>(m) * n), out(ref.size());
  cpu::Linear(xs.data(), m, k, wf.data(), n, f.s.bias ? bf.data() : nullptr, ref.data());
  const auto y0 = DownloadFloat(f.y0.get(), f.y0.size());
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      const size_t at = static_cast<size_t>(i) * f.ldy + j;
      out[static_cast<size_t>(i) * n + j] = Bf16ToFloat(got[at]);
      if (f.s.accumulate) ref[static_cast<size_t>(i) * n + j] += y0[at];
    }
  }
  row.err = Compare(out, ref);
  row.tol = 1e-2;
  row.pass = differ == 0 && row.err.non_finite == 0 && row.err.rel <= row.tol;
  if (differ > 0) row.note = std::to_string(differ) + " elements differ from the separate kernels";
  else row.note = "bitwise equal to the separate kernels";
  return row;
}

void SmallFused(const FusedShape& s, const std::vector<int>& ms) {
  FusedFixture f(s, *std::max_element(ms.begin(), ms.end()), 1);
  for (int m : ms) {
    for (int ks = 1; ks <= 8; ks *= 2) Record(CheckOne(f, m, ks));
  }
}

void TimedFused(const FusedShape& s, const std::vector<int>& ms) {
  const double w_bytes = 2.0 * s.n * s.k;
  const int copies = std::clamp(static_cast<int>(std::ceil(256e6 / w_bytes)), 1, 8);
  FusedFixture f(s, *std::max_element(ms.begin(), ms.end()), copies);
  for (int m : ms) {
    const int ks = cuda::LinearGemvAutoSplit(f.Args(f.x.get(), f.ldx, f.y.get(), m, 0));
    Row row = CheckOne(f, m, ks);
    // Both timed in graphs of back-to-back launches (W copy rotating); the accumulating kernels
    // keep adding to y, which changes nothing in their cost.
    int call = 0;
    row.time_us = TimeUsGraph([&](cudaStream_t st) { OC_OK(f.Fused(m, ks, call++ % copies, st)); });
    call = 0;
    const double unfused_us =
        TimeUsGraph([&](cudaStream_t st) { OC_OK(f.Unfused(m, ks, call++ % copies, st)); });
    row.bytes = w_bytes;
    char note[160];
    std::snprintf(note, sizeof(note), "; fused %.1f us vs separate %.1f us (x%.2f, graph), W x%d",
                  row.time_us, unfused_us, unfused_us / row.time_us, copies);
    row.note += note;
    Record(row);
  }
}

}  // namespace

void CheckGemvFused() {
  if (!Small()) {
    // Qwen3-8B's fused projections at decode batch sizes.
    const std::vector<int> ms = {1, 2, 4, 8};
    TimedFused({"qkv", 6144, 4096, Pro::kNorm, false}, ms);
    TimedFused({"o", 4096, 4096, Pro::kNone, true}, ms);
    TimedFused({"gate_up", 24576, 4096, Pro::kNorm, false}, ms);
    TimedFused({"down", 4096, 12288, Pro::kSilu, true}, ms);
  }
  // Odd sizes: n not a multiple of 16, k = 264 (33 loads of RmsNorm's 64-thread block: a
  // partial virtual warp; partial 32-column steps), bias, strided y; every split.
  SmallFused({"odd", 200, 264, Pro::kNorm, false, true}, {1, 3, 8});
  SmallFused({"odd", 200, 264, Pro::kSilu, true, false, 3}, {1, 5, 8});
  SmallFused({"odd", 72, 128, Pro::kNone, true, true, 5}, {2, 7});
  SmallFused({"odd", 40, 1040, Pro::kNorm, true}, {4});
  // The largest norm row (RmsNorm's 1024-thread block).
  SmallFused({"k8192", 24, 8192, Pro::kNorm, false}, {2});
  // Refused: m above 8, fp32 out, both a norm and an up input, k past the norm's limit.
  FusedFixture f({"refused", 32, 64, Pro::kNorm, false}, 9, 1);
  Row row{"linear", "refused shapes gemv-fused"};
  cuda::LinearArgs a = f.Args(f.x.get(), f.ldx, f.y.get(), 9, 0);
  cuda::GemvFusion fu = f.Fusion();
  const bool m9 = cuda::LinearGemvFused(a, fu, 0, nullptr).code() == StatusCode::kInvalidArgument;
  a.m = 2;
  a.out_dtype = cuda::OutDtype::kFloat32;
  const bool f32 = cuda::LinearGemvFused(a, fu, 0, nullptr).code() == StatusCode::kInvalidArgument;
  a.out_dtype = cuda::OutDtype::kBf16;
  fu.up = f.x.get();
  const bool both = cuda::LinearGemvFused(a, fu, 0, nullptr).code() == StatusCode::kInvalidArgument;
  fu.up = nullptr;
  a.k = cuda::kGemvFusedNormMaxK + 8;
  const bool big_k = !cuda::detail::GemvFusionSupported(a, fu);
  row.pass = m9 && f32 && both && big_k;
  row.note = std::string("m 9 ") + (m9 ? "refused" : "ACCEPTED") + ", fp32 out " +
             (f32 ? "refused" : "ACCEPTED") + ", norm + up " + (both ? "refused" : "ACCEPTED") +
             ", k 8200 norm " + (big_k ? "refused" : "ACCEPTED");
  Record(row);
}

}  // namespace tandem::opcheck
