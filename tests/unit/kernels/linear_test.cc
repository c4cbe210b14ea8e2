// cpu::Linear on bf16 / f16 / fp32 weights (matmul.h) against OpenBLAS cblas_sgemm over the same
// weights converted to fp32, with every instruction set the CPU has forced in turn: our kernels
// (m = 1..16, and every m on AVX2 / AVX-512) and the portable ISA's chunked sgemm path (m = 17, 33,
// 130), shapes that are not multiples of the
// vector width, with and without bias, one and several threads. And the conversions: every bf16
// and f16 bit pattern, each ISA against the scalar reference.
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/weight_matrix.h"

namespace tandem::cpu {
namespace {

const LinearIsa kIsas[] = {LinearIsa::kScalar, LinearIsa::kAvx2, LinearIsa::kAvx512};

class IsaGuard {
 public:
  ~IsaGuard() { SetLinearIsaForTesting(LinearIsa::kAuto); }
};

struct Weights {
  WeightType type;
  std::vector<uint16_t> bits16;  // bf16 / f16
  std::vector<float> f32;        // fp32 weights, or the exact values of bits16
  WeightMatrix matrix(int n, int k) const {
    return WeightMatrix{type, type == WeightType::kF32 ? static_cast<const void*>(f32.data()) : bits16.data(), n, k};
  }
};

Weights MakeWeights(WeightType type, int n, int k, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  Weights w{type, {}, std::vector<float>(static_cast<size_t>(n) * k)};
  if (type == WeightType::kF32) {
    for (float& v : w.f32) v = u(rng);
    return w;
  }
  // Random bit patterns of magnitude 2^-12 .. 2: sign, exponent, mantissa.
  w.bits16.resize(w.f32.size());
  std::uniform_int_distribution<int> sign(0, 1), mant(0, type == WeightType::kBF16 ? 127 : 1023);
  std::uniform_int_distribution<int> exp(-12, 0);
  for (size_t i = 0; i < w.f32.size(); ++i) {
    const int s = sign(rng), e = exp(rng), mn = mant(rng);
    w.bits16[i] = type == WeightType::kBF16
                      ? static_cast<uint16_t>((s << 15) | ((e + 127) << 7) | mn)
                      : static_cast<uint16_t>((s << 15) | ((e + 15) << 10) | mn);
    w.f32[i] = type == WeightType::kBF16 ? Bf16BitsToFloat(w.bits16[i]) : HalfBitsToFloat(w.bits16[i]);
  }
  return w;
}

// Our Linear against cblas_sgemm over the fp32 values: |difference| within the rounding bound of
// two fp32 sums of k products (2 k eps sum |x w|, plus the bias).
void ExpectMatchesSgemm(const Weights& w, int m, int n, int k, bool with_bias, std::mt19937& rng,
                        const std::string& label) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(static_cast<size_t>(m) * k), bias(n), y(static_cast<size_t>(m) * n, NAN),
      ref(static_cast<size_t>(m) * n);
  for (float& v : x) v = u(rng);
  for (float& v : bias) v = u(rng);
  Linear(x.data(), m, w.matrix(n, k), with_bias ? bias.data() : nullptr, y.data());
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.data(), k, w.f32.data(), k, 0.0f,
              ref.data(), n);
  const double eps = std::ldexp(1.0, -23);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double abs_sum = 0;
      for (int c = 0; c < k; ++c) abs_sum += std::fabs(static_cast<double>(x[i * k + c]) * w.f32[static_cast<size_t>(j) * k + c]);
      const double want = ref[static_cast<size_t>(i) * n + j] + (with_bias ? bias[j] : 0.0f);
      const double got = y[static_cast<size_t>(i) * n + j];
      ASSERT_NEAR(got, want, 2 * k * eps * abs_sum + 4 * eps * std::fabs(want) + 1e-30)
          << label << " m " << m << " row " << i << " col " << j;
    }
  }
}

TEST(Linear, AllIsasAllTypesAgainstSgemm) {
  IsaGuard guard;
  const int threads_before = LinearThreads();
  std::mt19937 rng(29);
  struct Shape { int n, k; };
  const Shape shapes[] = {{1, 1}, {37, 29}, {8, 16}, {130, 300}, {301, 17}, {1000, 257}};
  int tested_isas = 0;
  for (const LinearIsa isa : kIsas) {
    if (!SetLinearIsaForTesting(isa)) continue;  // this CPU lacks it
    ASSERT_EQ(ActiveLinearIsa(), isa);
    ++tested_isas;
    for (const WeightType type : {WeightType::kBF16, WeightType::kF16, WeightType::kF32}) {
      for (const Shape& s : shapes) {
        const Weights w = MakeWeights(type, s.n, s.k, rng);
        for (const int threads : {1, 3}) {
          SetLinearThreads(threads);
          for (const int m : {1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 33, 130}) {
            for (const bool bias : {false, true}) {
              const std::string label = std::string(LinearIsaName(isa)) + " " + WeightTypeName(type) + " n " +
                                        std::to_string(s.n) + " k " + std::to_string(s.k) + " threads " +
                                        std::to_string(threads) + (bias ? " bias" : "");
              ExpectMatchesSgemm(w, m, s.n, s.k, bias, rng, label);
              if (HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
  SetLinearThreads(threads_before);
  EXPECT_GE(tested_isas, 1);
  std::printf("[linear] ISAs tested: %d (auto = %s)\n", tested_isas,
              LinearIsaName(SetLinearIsaForTesting(LinearIsa::kAuto) ? ActiveLinearIsa() : LinearIsa::kAuto));
}

// LinearOnThread (the caller's thread only): Linear's values bit for bit on the SIMD ISAs, which
// take every m; the portable ISA's 16-row groups within the sgemm bound.
TEST(Linear, OnThreadEqualsLinear) {
  IsaGuard guard;
  const int threads_before = LinearThreads();
  SetLinearThreads(3);
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const LinearIsa isa : kIsas) {
    if (!SetLinearIsaForTesting(isa)) continue;
    for (const WeightType type : {WeightType::kBF16, WeightType::kF32}) {
      for (const auto [n, k] : {std::pair{37, 29}, {768, 256}, {260, 768}}) {
        const Weights w = MakeWeights(type, n, k, rng);
        for (const int m : {1, 5, 16, 33, 64}) {
          std::vector<float> x(static_cast<size_t>(m) * k), bias(n);
          for (float& v : x) v = u(rng);
          for (float& v : bias) v = u(rng);
          std::vector<float> y(static_cast<size_t>(m) * n, NAN), z(y.size(), NAN);
          Linear(x.data(), m, w.matrix(n, k), bias.data(), y.data());
          LinearOnThread(x.data(), m, w.matrix(n, k), bias.data(), z.data());
          const std::string label = std::string(LinearIsaName(isa)) + " " + WeightTypeName(type) + " n " +
                                    std::to_string(n) + " k " + std::to_string(k) + " m " + std::to_string(m);
          if (isa != LinearIsa::kScalar || m <= 16) {
            ASSERT_EQ(0, std::memcmp(y.data(), z.data(), y.size() * sizeof(float))) << label;
          } else {
            for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], z[i], 1e-4 * (1 + std::fabs(y[i]))) << label;
          }
        }
      }
    }
  }
  SetLinearThreads(threads_before);
}

// A wrong element of W (one of n x k) must show: the test above can fail.
TEST(Linear, DetectsAWrongWeight) {
  std::mt19937 rng(5);
  const int n = 37, k = 29, m = 3;
  Weights w = MakeWeights(WeightType::kBF16, n, k, rng);
  std::vector<float> x(m * k, 1.0f), y(m * n), ref(m * n);
  Linear(x.data(), m, w.matrix(n, k), nullptr, y.data());
  w.bits16[5 * k + 28] ^= 0x4000;  // the last column of row 5: the vector tail
  Linear(x.data(), m, w.matrix(n, k), nullptr, ref.data());
  EXPECT_NE(y[5], ref[5]);
  EXPECT_EQ(y[4], ref[4]);
}

TEST(Linear, ConversionsOfEveryBitPattern) {
  IsaGuard guard;
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (const WeightType type : {WeightType::kBF16, WeightType::kF16}) {
    const WeightMatrix m{type, all.data(), 4096, 16};
    std::vector<float> want(all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      want[i] = type == WeightType::kBF16 ? Bf16BitsToFloat(all[i]) : HalfBitsToFloat(all[i]);
    }
    for (const LinearIsa isa : kIsas) {
      if (!SetLinearIsaForTesting(isa)) continue;
      std::vector<float> got(all.size());
      // Odd row ranges: the vector tails.
      WeightRowsToFloat(m, 0, 1, got.data());
      WeightRowsToFloat(m, 1, 4095, got.data() + 16);
      for (size_t i = 0; i < all.size(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << LinearIsaName(isa) << " " << WeightTypeName(type) << " " << i;
        } else {
          uint32_t a, b;
          std::memcpy(&a, &want[i], 4);
          std::memcpy(&b, &got[i], 4);
          ASSERT_EQ(a, b) << LinearIsaName(isa) << " " << WeightTypeName(type) << " " << i;
        }
      }
    }
  }
  // Spot values: 1.0, -2.0, the smallest subnormal half, half's max.
  EXPECT_EQ(HalfBitsToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfBitsToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfBitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfBitsToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Bf16BitsToFloat(0x3f80), 1.0f);
}

TEST(Linear, UnalignedWeights) {
  // A weight that starts 2 bytes into a buffer (as in a mapped file): unaligned loads everywhere.
  IsaGuard guard;
  std::mt19937 rng(7);
  const int n = 19, k = 45;
  const Weights w = MakeWeights(WeightType::kBF16, n, k, rng);
  std::vector<uint16_t> shifted(w.bits16.size() + 1);
  std::memcpy(shifted.data() + 1, w.bits16.data(), w.bits16.size() * 2);
  for (const LinearIsa isa : kIsas) {
    if (!SetLinearIsaForTesting(isa)) continue;
    std::vector<float> x(3 * k, 0.5f), a(3 * n), b(3 * n);
    Linear(x.data(), 3, w.matrix(n, k), nullptr, a.data());
    Linear(x.data(), 3, WeightMatrix{WeightType::kBF16, shifted.data() + 1, n, k}, nullptr, b.data());
    EXPECT_EQ(a, b) << LinearIsaName(isa);
  }
}

}  // namespace
}  // namespace tandem::cpu
