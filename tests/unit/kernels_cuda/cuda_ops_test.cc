// The small and odd shapes of cuda_op_check (dev/kernels) as a test: every CUDA op against its CPU
// reference on random inputs. Skips on a machine without a CUDA device (CI builds it, the device
// machine runs it; scripts/gpu-check.sh runs the full check with the large shapes and timings).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

bool HaveDevice() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(CudaOpsTest, SmallShapesMatchCpuReference) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  SetSmall(true);
  SetBaseSeed(20261130);
  CheckEmbedding();
  CheckRmsNorm();
  CheckQkNormRope();
  CheckSiluMul();
  CheckReshapeAndCache();
  CheckPagedPrefill();
  CheckPagedDecode();
  CheckLinear();
  CheckFp8();
  CheckSampling();
  EXPECT_EQ(PrintTable(), 0);
}

}  // namespace
}  // namespace tandem::opcheck
