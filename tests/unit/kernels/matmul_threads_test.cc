// cpu::SetLinearThreads sizes the CPU pool (LinearThreads reads it back) and leaves OpenBLAS at one
// thread (its pool never competes with ours), and the product does not depend on the thread count:
// bit for bit in our kernels (rows of W split across threads, each sum computed whole), within
// rounding on the portable ISA's sgemm path (m > 16), both against a plain loop in double.
#include <cblas.h>

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
  EXPECT_EQ(openblas_get_num_threads(), 1);
  SetLinearThreads(0);  // clamped to 1
  EXPECT_EQ(LinearThreads(), 1);
  SetLinearThreads(3);
  EXPECT_EQ(LinearThreads(), 3);
  EXPECT_EQ(openblas_get_num_threads(), 1);
  SetLinearThreads(2);
  EXPECT_EQ(LinearThreads(), 2);
  SetLinearThreads(before);
  EXPECT_EQ(LinearThreads(), before);
}

TEST(LinearThreads, ProductIndependentOfThreads) {
  const int before = LinearThreads();
  const int k = 300, n = 1013;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w(static_cast<size_t>(n) * k), bias(n);
  for (float& v : w) v = u(rng);
  for (float& v : bias) v = u(rng);
  for (const int m : {1, 5, 16, 17, 40}) {
    SCOPED_TRACE(m);
    std::vector<float> x(static_cast<size_t>(m) * k);
    for (float& v : x) v = u(rng);
    std::vector<std::vector<float>> y;
    for (const int threads : {1, 2, 3, 4}) {
      SetLinearThreads(threads);
      y.emplace_back(static_cast<size_t>(m) * n, NAN);
      Linear(x.data(), m, k, w.data(), n, bias.data(), y.back().data());
    }
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double ref = bias[j];
        for (int l = 0; l < k; ++l) ref += static_cast<double>(x[i * k + l]) * w[static_cast<size_t>(j) * k + l];
        for (size_t t = 0; t < y.size(); ++t) {
          const float got = y[t][static_cast<size_t>(i) * n + j];
          ASSERT_NEAR(got, ref, 1e-3) << i << " " << j << " threads " << t + 1;
          if (m <= 16 || ActiveLinearIsa() != LinearIsa::kScalar) {
            ASSERT_EQ(got, y[0][static_cast<size_t>(i) * n + j]) << i << " " << j << " threads " << t + 1;
          }
        }
      }
    }
  }
  SetLinearThreads(before);
}

}  // namespace
}  // namespace tandem::cpu
