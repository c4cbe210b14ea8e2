// cuda_op_check: the warpgroup-MMA probe (wgmma_probe.cu) against a double-precision CPU product,
// on sm_90 devices of builds with sm_90a code; one row per form (skipped with a note elsewhere).
#include <cstdio>
#include <vector>

#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/paged_attention.h"
#include "op_check_util.h"

namespace tandem::opcheck {

cudaError_t LaunchWgmmaProbe(const bf16* a, const bf16* b, float* d, int mode);

void CheckWgmmaProbe() {
  const cuda::DeviceLimits& dev = cuda::CurrentDeviceLimits();
  if (!cuda::detail::PagedPrefillWgmmaBuilt() || dev.cc_major != 9 || dev.cc_minor != 0) {
    std::printf("wgmma probe: skipped (needs an sm_90 device and a build with sm_90a code)\n");
    return;
  }
  static const char* const kForms[] = {"ss k-major (S = Q K^T)", "rs trans-b (O += P V)"};
  for (int mode = 0; mode < 2; ++mode) {
    DevBuf<bf16> a(64 * 128), b(128 * 128);
    DevBuf<float> d(64 * 128);
    FillUniform(a.get(), a.size(), NextSeed(), -1.0f, 1.0f);
    FillUniform(b.get(), b.size(), NextSeed(), -1.0f, 1.0f);
    d.Poison();
    OC_CUDA(LaunchWgmmaProbe(a.get(), b.get(), d.get(), mode));
    OC_CUDA(cudaDeviceSynchronize());
    const auto af = DownloadFloat(a), bf = DownloadFloat(b);
    std::vector<float> ref(64 * 128);
    for (int m = 0; m < 64; ++m) {
      for (int n = 0; n < 128; ++n) {
        double acc = 0;
        for (int k = 0; k < 128; ++k) {
          // mode 0: B is [n][k]; mode 1: B is [k][n].
          acc += double{af[m * 128 + k]} * (mode == 0 ? bf[n * 128 + k] : bf[k * 128 + n]);
        }
        ref[m * 128 + n] = static_cast<float>(acc);
      }
    }
    Row row{"wgmma_probe", kForms[mode]};
    row.err = Compare(d.Download(), ref);
    row.tol = 1e-5;  // bf16 products are exact in fp32; only the accumulation order differs
    row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol;
    Record(row);
  }
}

}  // namespace tandem::opcheck
