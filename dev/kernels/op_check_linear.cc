// cuda_op_check: Linear (cuBLAS bf16, fp32 compute) against cpu::Linear on sampled rows.
#include <algorithm>
#include <random>

#include "kernels/cpu/matmul.h"
#include "kernels/cuda/linear.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

// bf16 inputs are exact in fp32; the GEMM accumulates in fp32 (error ~ sqrt(k) * 2^-24 relative)
// and rounds the output to bf16 once (2^-9): well under 1e-2.
constexpr double kTolLinear = 1e-2;
constexpr int kRefRows = 8;  // rows of the output checked against the CPU (all rows for small m)

cuda::CublasHandle& Handle() {
  static Result<cuda::CublasHandle> h = cuda::CublasHandle::Create();
  if (!h.ok()) {
    std::fprintf(stderr, "FATAL cublas: %s\n", h.status().ToString().c_str());
    std::exit(2);
  }
  return *h;
}

// One weight [n, k], several batch sizes m.
void LinearCase(const char* label, int n, int k, const std::vector<int>& ms, bool bias,
                cuda::OutDtype out_dtype) {
  const int max_m = *std::max_element(ms.begin(), ms.end());
  DevBuf<bf16> x(static_cast<size_t>(max_m) * k), w(static_cast<size_t>(n) * k), b(bias ? n : 0);
  FillUniform(x.get(), x.size(), NextSeed(), -1.0f, 1.0f);
  FillUniform(w.get(), w.size(), NextSeed(), -0.05f, 0.05f);
  if (bias) FillUniform(b.get(), n, NextSeed(), -1.0f, 1.0f);
  const bool f32 = out_dtype == cuda::OutDtype::kFloat32;
  DevBuf<bf16> y16(f32 ? 0 : static_cast<size_t>(max_m) * n);
  DevBuf<float> y32(f32 ? static_cast<size_t>(max_m) * n : 0);
  const auto wf = DownloadFloat(w);
  const auto xf = DownloadFloat(x);
  const auto bf = bias ? DownloadFloat(b) : std::vector<float>();
  std::mt19937 rng(NextSeed());
  for (int m : ms) {
    f32 ? y32.Poison() : y16.Poison();
    cuda::LinearArgs a;
    a.x = x.get();
    a.ldx = k;
    a.w = w.get();
    a.bias = bias ? b.get() : nullptr;
    a.y = f32 ? static_cast<void*>(y32.get()) : static_cast<void*>(y16.get());
    a.ldy = n;
    a.out_dtype = out_dtype;
    a.m = m;
    a.n = n;
    a.k = k;
    auto run = [&] { OC_OK(cuda::Linear(Handle(), a, nullptr)); };
    run();
    OC_CUDA(cudaDeviceSynchronize());
    std::vector<float> y;
    if (f32) {
      y = y32.Download();
    } else {
      y = DownloadFloat(y16);
    }
    y.resize(static_cast<size_t>(m) * n);
    // Reference on sampled rows (first, last, random).
    std::vector<int> rows;
    if (m <= kRefRows) {
      for (int i = 0; i < m; ++i) rows.push_back(i);
    } else {
      rows = {0, m - 1};
      while (static_cast<int>(rows.size()) < kRefRows) {
        rows.push_back(std::uniform_int_distribution<int>(1, m - 2)(rng));
      }
    }
    const int R = static_cast<int>(rows.size());
    std::vector<float> xs(static_cast<size_t>(R) * k), ref(static_cast<size_t>(R) * n),
        out(ref.size());
    for (int r = 0; r < R; ++r) {
      std::copy_n(xf.begin() + static_cast<size_t>(rows[r]) * k, k, xs.begin() + static_cast<size_t>(r) * k);
      std::copy_n(y.begin() + static_cast<size_t>(rows[r]) * n, n, out.begin() + static_cast<size_t>(r) * n);
    }
    cpu::Linear(xs.data(), R, k, wf.data(), n, bias ? bf.data() : nullptr, ref.data());
    char shape[128];
    std::snprintf(shape, sizeof(shape), "%s m %d n %d k %d%s%s", label, m, n, k,
                  bias ? " +bias" : "", f32 ? " f32 out" : "");
    Row row{"linear", shape};
    row.err = Compare(out, ref);
    long unwritten = 0;  // every element written (poison is NaN), not only the sampled rows
    for (float v : y) unwritten += std::isfinite(v) ? 0 : 1;
    if (unwritten > 0) row.note = std::to_string(unwritten) + " non-finite outputs";
    row.tol = kTolLinear;
    row.pass = row.err.non_finite == 0 && unwritten == 0 && row.err.rel <= row.tol;
    row.time_us = TimeUs(run);
    if (m >= 64) {
      row.flops = 2.0 * m * n * k;
    } else {
      row.bytes = (static_cast<double>(n) * k + static_cast<double>(m) * k) * sizeof(bf16) +
                  static_cast<double>(m) * n * (f32 ? 4 : 2);
    }
    Record(row);
  }
}

}  // namespace

void CheckLinear() {
  // Qwen3-8B projections: qkv, o, gate_up, down, lm_head (fp32 logits).
  if (!Small()) {
    LinearCase("qkv", 6144, 4096, {1, 64, 2048}, false, cuda::OutDtype::kBf16);
    LinearCase("o", 4096, 4096, {1, 2048}, false, cuda::OutDtype::kBf16);
    LinearCase("gate_up", 24576, 4096, {1, 256, 2048}, false, cuda::OutDtype::kBf16);
    LinearCase("down", 4096, 12288, {1, 2048}, false, cuda::OutDtype::kBf16);
    LinearCase("lm_head", 151936, 4096, {1, 64}, false, cuda::OutDtype::kFloat32);
    LinearCase("8192^3", 8192, 8192, {8192}, false, cuda::OutDtype::kBf16);  // DESIGN.md ceiling
  }
  LinearCase("odd", 1000, 333, {37}, true, cuda::OutDtype::kBf16);
  LinearCase("qkv bias", 4608, 3584, {19}, true, cuda::OutDtype::kFloat32);
}

}  // namespace tandem::opcheck
