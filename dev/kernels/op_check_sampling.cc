// cuda_op_check: the sampling ops (log-softmax, argmax, top-k) against the CPU ones.
#include <algorithm>
#include <random>

#include "kernels/cpu/log_softmax.h"
#include "kernels/cuda/sampling.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

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

void CheckSampling() {
  if (!Small()) SamplingCase(64, 151936, 20);
  SamplingCase(3, 1000, 1000);  // k = n: a full sort
  SamplingCase(1, 151936, 1);
}

}  // namespace tandem::opcheck
