// The portable kernels of gemv.h (no SIMD intrinsics) and the scalar conversions of weight_matrix.h.
#include <cstring>
#include <vector>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/weight_matrix.h"

namespace tandem::cpu {

const char* WeightTypeName(WeightType t) {
  switch (t) {
    case WeightType::kF32: return "f32";
    case WeightType::kBF16: return "bf16";
    case WeightType::kF16: return "f16";
  }
  return "?";
}

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {  // inf / NaN
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {  // zero
    bits = sign;
  } else {  // subnormal: normalize
    uint32_t e = 113;  // 127 - 15 + 1
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    mant &= 0x3ffu;
    bits = sign | (e << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace {

void ConvertScalar(const WeightMatrix& w, int64_t row_begin, int64_t num_rows, float* out) {
  const int64_t n = num_rows * w.cols;
  const uint8_t* src = w.At(row_begin, 0);
  switch (w.type) {
    case WeightType::kF32:
      std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case WeightType::kBF16: {
      // 8 at a time through vector types (SSE2 / NEON), then the tail.
      typedef uint16_t U16x8 __attribute__((vector_size(16)));
      typedef uint32_t U32x8 __attribute__((vector_size(32)));
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        U16x8 b;
        std::memcpy(&b, src + 2 * i, sizeof b);
        const U32x8 u = __builtin_convertvector(b, U32x8) << 16;
        std::memcpy(out + i, &u, sizeof u);
      }
      for (; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = Bf16BitsToFloat(b);
      }
      return;
    }
    case WeightType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = HalfBitsToFloat(h);
      }
      return;
  }
}

// sum over c of a[c] * b[c] in 16 independent partial sums (lane l takes c = l mod 16), added
// together at the end: GCC/Clang vector types, which the baseline ISA (SSE2, NEON) runs as 4-wide
// vectors without reassociating anything.
float Dot(const float* a, const float* b, int64_t n) {
  typedef float V4 __attribute__((vector_size(16)));
  V4 acc0 = {}, acc1 = {}, acc2 = {}, acc3 = {};
  auto load = [](const float* p) {
    V4 v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  int64_t c = 0;
  for (; c + 16 <= n; c += 16) {
    acc0 += load(a + c) * load(b + c);
    acc1 += load(a + c + 4) * load(b + c + 4);
    acc2 += load(a + c + 8) * load(b + c + 8);
    acc3 += load(a + c + 12) * load(b + c + 12);
  }
  float lanes[16];
  std::memcpy(lanes, &acc0, 16);
  std::memcpy(lanes + 4, &acc1, 16);
  std::memcpy(lanes + 8, &acc2, 16);
  std::memcpy(lanes + 12, &acc3, 16);
  for (int l = 0; c < n; ++c, ++l) lanes[l] += a[c] * b[c];
  float sum = 0.0f;
  for (float v : lanes) sum += v;
  return sum;
}

void GemvScalar(const float* x, int m, const WeightMatrix& w, int64_t row_begin, int64_t row_end,
                const float* bias, float* y, int64_t ldy) {
  const int64_t k = w.cols;
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(k));
  for (int64_t j = row_begin; j < row_end; ++j) {
    const float* wj = reinterpret_cast<const float*>(w.At(j, 0));
    if (w.type != WeightType::kF32) {
      ConvertScalar(w, j, 1, row.data());
      wj = row.data();
    }
    for (int i = 0; i < m; ++i) {
      const float sum = Dot(x + static_cast<int64_t>(i) * k, wj, k);
      y[i * ldy + j] = bias != nullptr ? sum + bias[j] : sum;
    }
  }
}

}  // namespace

GemvKernels ScalarGemvKernels() { return {LinearIsa::kScalar, GemvScalar, ConvertScalar}; }

}  // namespace tandem::cpu
