// CPU kernels against plain loops: rms_norm, matmul (Linear), silu_mul, embedding, log_softmax.
#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/log_softmax.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/silu_mul.h"

namespace tandem::cpu {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(RmsNormTest, MatchesPlainLoop) {
  const int rows = 5, dim = 37;
  const auto x = Random(rows * dim, 1, -3, 3), w = Random(dim, 2, 0.5, 1.5);
  std::vector<float> y(x.size());
  RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, y.data());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (int i = 0; i < dim; ++i) EXPECT_NEAR(y[r * dim + i], x[r * dim + i] * inv * w[i], 1e-5);
  }
  std::vector<float> in_place = x;  // aliasing allowed
  RmsNorm(in_place.data(), w.data(), rows, dim, 1e-6f, in_place.data());
  EXPECT_EQ(in_place, y);
}

// RmsNorm and its calling-thread variant, bit for bit the one-row-at-a-time loop (sum of squares
// in double, in index order).
TEST(RmsNormTest, BitForBitThePlainLoop) {
  for (const int dim : {64, 256, 37}) {
    const int rows = 203;
    const auto x = Random(rows * dim, 8, -3, 3), w = Random(dim, 9, 0.5, 1.5);
    std::vector<float> want(x.size()), y(x.size()), z(x.size());
    for (int r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
      const float variance = static_cast<float>(ss / dim);
      const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance + 1e-6f)));
      for (int i = 0; i < dim; ++i) want[r * dim + i] = w[i] * (x[r * dim + i] * inv);
    }
    RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, y.data());
    RmsNormRows(x.data(), w.data(), rows, dim, 1e-6f, z.data());
    EXPECT_EQ(y, want) << dim;
    EXPECT_EQ(z, want) << dim;
  }
}

// SiluMul and its calling-thread variant, bit for bit the float loop over std::exp (cpu::Exp gives
// std::exp's values), on every ISA.
TEST(SiluMulTest, BitForBitThePlainLoop) {
  const long n = 100003;
  const auto g = Random(n, 10, -20, 20), u = Random(n, 11);
  std::vector<float> want(n);
  for (long i = 0; i < n; ++i) want[i] = (g[i] / (1.0f + std::exp(-g[i]))) * u[i];
  for (const LinearIsa isa : {LinearIsa::kScalar, LinearIsa::kAvx2, LinearIsa::kAvx512}) {
    if (!SetLinearIsaForTesting(isa)) continue;
    std::vector<float> a(n), b(n);
    SiluMul(g.data(), u.data(), n, a.data());
    SiluMulSerial(g.data(), u.data(), n, b.data());
    EXPECT_EQ(a, want) << LinearIsaName(isa);
    EXPECT_EQ(b, want) << LinearIsaName(isa);
  }
  SetLinearIsaForTesting(LinearIsa::kAuto);
}

TEST(MatmulTest, LinearIsXTimesWTransposedPlusBias) {
  for (auto [m, k, n] : {std::tuple{1, 8, 3}, {7, 33, 65}, {64, 256, 17}}) {
    const auto x = Random(m * k, 3), w = Random(n * k, 4), b = Random(n, 5);
    std::vector<float> y(m * n), yb(m * n);
    Linear(x.data(), m, k, w.data(), n, nullptr, y.data());
    Linear(x.data(), m, k, w.data(), n, b.data(), yb.data());
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int e = 0; e < k; ++e) s += double(x[i * k + e]) * w[j * k + e];
        EXPECT_NEAR(y[i * n + j], s, 1e-4) << m << "x" << k << "x" << n;
        EXPECT_NEAR(yb[i * n + j], s + b[j], 1e-4);
      }
    }
  }
}

TEST(SiluMulTest, MatchesFormula) {
  const auto g = Random(100, 6, -20, 20), u = Random(100, 7);
  std::vector<float> out(100);
  SiluMul(g.data(), u.data(), 100, out.data());
  for (int i = 0; i < 100; ++i) {
    const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 1e-5 * std::max(1.0, std::abs(want)));
  }
}

TEST(EmbeddingTest, GathersRows) {
  const auto table = Random(10 * 4, 8);
  const std::vector<int32_t> ids = {3, 0, 9, 3};
  std::vector<float> out(ids.size() * 4);
  Embedding(ids.data(), 4, table.data(), 4, out.data());
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[t * 4 + i], table[ids[t] * 4 + i]);
}

TEST(LogSoftmaxTest, NormalizesAndRanks) {
  auto x = Random(1000, 9, -30, 30);
  x[417] = 100.0f;
  x[900] = 100.0f;  // a tie: the first index wins, like torch.argmax
  x[3] = 99.0f;
  std::vector<float> lp(x.size());
  LogSoftmax(x.data(), 1000, lp.data());
  double total = 0;
  for (float v : lp) total += std::exp(double(v));
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_NEAR(lp[417], std::log(0.5 / (1 + 0.5 * std::exp(-1.0))) , 1e-4);
  EXPECT_EQ(Argmax(x.data(), 1000), 417);
  const auto top = TopK(x.data(), 1000, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 417);
  EXPECT_EQ(top[1].first, 900);
  EXPECT_EQ(top[2].first, 3);
  EXPECT_EQ(TopK(x.data(), 2, 5).size(), 2u);
}

}  // namespace
}  // namespace tandem::cpu
