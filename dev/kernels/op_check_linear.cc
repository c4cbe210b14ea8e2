// cuda_op_check: Linear (cuBLAS bf16, fp32 compute) against cpu::Linear on sampled rows, and the
// sampling ops (log-softmax, argmax, top-k) against the CPU ones.
#include <algorithm>
#include <random>

#include "kernels/cpu/log_softmax.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/sampling.h"
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

void SamplingCase(int rows, int n, int k) {
  // Logits with many ties: bf16-rounded uniform values, plus planted rows.
  DevBuf<bf16> seed_vals(static_cast<size_t>(rows) * n);
  FillUniform(seed_vals.get(), seed_vals.size(), NextSeed(), -10.0f, 10.0f);
  std::vector<float> logits = DownloadFloat(seed_vals);
  if (rows > 0) logits[static_cast<size_t>(n) - 1] = 100.0f;                 // max at the end
  if (rows > 1) std::fill_n(logits.begin() + n, n, 1.5f);                    // all tied
  if (rows > 2) {
    logits[2 * static_cast<size_t>(n) + 5] = 50.0f;                          // tied maxima
    logits[3 * static_cast<size_t>(n) - 1] = 50.0f;
  }
  DevBuf<float> d_logits(logits.size()), d_lsm(logits.size()), d_vals(static_cast<size_t>(rows) * k);
  DevBuf<int32_t> d_arg(rows), d_ids(static_cast<size_t>(rows) * k);
  d_logits.Upload(logits);
  d_lsm.Poison();
  d_vals.Poison();
  d_arg.Poison();
  d_ids.Poison();
  auto lsm = [&] { OC_OK(cuda::LogSoftmax(d_logits.get(), n, rows, n, d_lsm.get(), n, nullptr)); };
  auto arg = [&] { OC_OK(cuda::Argmax(d_logits.get(), n, rows, n, d_arg.get(), nullptr)); };
  auto topk = [&] { OC_OK(cuda::TopK(d_lsm.get(), n, rows, n, k, d_ids.get(), d_vals.get(), nullptr)); };
  lsm();
  arg();
  topk();  // over the log-probs, as top_logprobs does
  OC_CUDA(cudaDeviceSynchronize());
  const auto g_lsm = d_lsm.Download();
  const auto g_arg = d_arg.Download();
  const auto g_ids = d_ids.Download();
  const auto g_vals = d_vals.Download();
  std::vector<float> ref_lsm(logits.size());
  long arg_bad = 0, topk_bad = 0;
  for (int r = 0; r < rows; ++r) {
    const float* row = logits.data() + static_cast<size_t>(r) * n;
    cpu::LogSoftmax(row, n, ref_lsm.data() + static_cast<size_t>(r) * n);
    arg_bad += g_arg[r] != cpu::Argmax(row, n);
    // TopK of the GPU's own log-probs (the ranking must match exactly on the same input).
    const auto top = cpu::TopK(g_lsm.data() + static_cast<size_t>(r) * n, n, k);
    for (int i = 0; i < k; ++i) {
      topk_bad += g_ids[static_cast<size_t>(r) * k + i] != top[i].first ||
                  g_vals[static_cast<size_t>(r) * k + i] != top[i].second;
    }
  }
  char shape[96];
  std::snprintf(shape, sizeof(shape), "rows %d vocab %d", rows, n);
  const double row_bytes = static_cast<double>(rows) * n * sizeof(float);
  Row r1{"log_softmax", shape};
  r1.err = Compare(g_lsm, ref_lsm);
  r1.tol = 1e-5;
  r1.pass = r1.err.non_finite == 0 && r1.err.rel <= r1.tol;
  r1.time_us = TimeUs(lsm);
  r1.bytes = 2 * row_bytes;
  Record(r1);
  Row r2{"argmax", shape};
  r2.tol = 0;
  r2.pass = arg_bad == 0;
  r2.note = std::to_string(arg_bad) + " rows differ";
  r2.time_us = TimeUs(arg);
  r2.bytes = row_bytes;
  Record(r2);
  Row r3{"top_k", std::string(shape) + " k " + std::to_string(k)};
  r3.tol = 0;
  r3.pass = topk_bad == 0;
  r3.note = std::to_string(topk_bad) + " entries differ";
  r3.time_us = TimeUs(topk, 3, 9);
  r3.bytes = row_bytes;  // one pass counted; k passes run (mostly from L2)
  Record(r3);
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

void CheckSampling() {
  if (!Small()) SamplingCase(64, 151936, 20);
  SamplingCase(3, 1000, 1000);  // k = n: a full sort
  SamplingCase(1, 151936, 1);
}

}  // namespace tandem::opcheck
