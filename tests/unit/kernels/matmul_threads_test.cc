// cpu::SetLinearThreads reaches OpenBLAS's pool (openblas_get_num_threads reads it back), and the
// product does not depend on the thread count (cblas_sgemm against a plain loop in double).
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/matmul.h"

namespace tandem::cpu {
namespace {

TEST(LinearThreads, SetAndReadBack) {
  const int before = LinearThreads();
  SetLinearThreads(1);
  EXPECT_EQ(LinearThreads(), 1);
  SetLinearThreads(0);  // clamped to 1
  EXPECT_EQ(LinearThreads(), 1);
  const int m = 7, k = 300, n = 513;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(m * k), w(n * k), y1(m * n), y2(m * n);
  for (float& v : x) v = u(rng);
  for (float& v : w) v = u(rng);
  Linear(x.data(), m, k, w.data(), n, nullptr, y1.data());
  SetLinearThreads(2);
  EXPECT_GE(LinearThreads(), 1);
  Linear(x.data(), m, k, w.data(), n, nullptr, y2.data());
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int l = 0; l < k; ++l) ref += static_cast<double>(x[i * k + l]) * w[j * k + l];
      ASSERT_NEAR(y1[i * n + j], ref, 1e-3) << i << " " << j;
      ASSERT_NEAR(y2[i * n + j], ref, 1e-3) << i << " " << j;
    }
  }
  SetLinearThreads(before);
}

}  // namespace
}  // namespace tandem::cpu
