// FP8 E4M3 on the device (included only by .cu files): exact e4m3 -> bf16 conversion of four codes
// at once, and float -> e4m3 with saturation. The format: kernels/cpu/fp8.h (OCP OFP8 rev. 1.0,
// section 5.1: bias 7, 3 mantissa bits, no infinities, 0x7f / 0xff NaN, largest 448).
//
// Conversion to bf16 without a float round trip: each code's byte is placed in the high byte of a
// 16-bit lane (PRMT), the 7 magnitude bits shifted right by 4 under the sign, which is the bf16
// whose exponent field holds the e4m3 exponent field unchanged: the value times 2^-120 (bias 127
// against 7), subnormal codes included (an e4m3 subnormal m/8 * 2^-6 becomes the bf16 subnormal
// m/8 * 2^-126). One bf16x2 multiply by 2^120 (a power of two: exact, subnormals kept, as the bf16
// FMA has no flush-to-zero) gives the code's value exactly; every e4m3 value is a bf16 value
// (3 <= 7 mantissa bits, 2^-9..448 inside bf16's range). NaN codes become finite values (weights
// hold none).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tandem::cuda::detail {

constexpr float kFp8Max = 448.0f;

#ifdef TANDEM_CUDA_EMU
// Bytes of the pair (b, a): selector nibble i (0-3: a's bytes, 4-7: b's) picks output byte i.
inline uint32_t Prmt2(uint32_t a, uint32_t b, uint32_t selector) {
  const uint64_t ab = (static_cast<uint64_t>(b) << 32) | a;
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) out |= static_cast<uint32_t>((ab >> (8 * ((selector >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return out;
}
inline uint32_t Prmt(uint32_t a, uint32_t selector) { return Prmt2(a, 0, selector); }
// bf16x2 times 2^120, exactly (the emulator through float: every operand and result is exact).
inline uint32_t TimesTwoTo120(uint32_t v) {
  uint32_t out = 0;
  for (int h = 0; h < 2; ++h) {
    const uint32_t bits = ((v >> (16 * h)) & 0xffffu) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    f = static_cast<float>(static_cast<double>(f) * 1.329227995784916e36);  // 2^120
    uint32_t r;
    std::memcpy(&r, &f, 4);
    out |= (r >> 16) << (16 * h);
  }
  return out;
}
#else
__device__ inline uint32_t Prmt(uint32_t a, uint32_t selector) {
  uint32_t out;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(out) : "r"(a), "r"(selector));
  return out;
}
// Bytes of the pair (b, a): selector nibble i (0-3: a's bytes, 4-7: b's) picks output byte i.
__device__ inline uint32_t Prmt2(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t out;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(out) : "r"(a), "r"(b), "r"(selector));
  return out;
}
__device__ inline uint32_t TimesTwoTo120(uint32_t v) {
  uint32_t out;
  // 0x7b80 is bf16 2^120 (exponent field 247); -0.0 as the addend keeps a -0 product -0.
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(out) : "r"(v), "r"(0x7b807b80u), "r"(0x80008000u));
  return out;
}
#endif

// Four e4m3 codes (byte i of `codes` is element i) -> two bf16x2 words: lo = {e0, e1}, hi = {e2, e3}
// (element 2j in the low half), each the code's exact value.
__device__ inline void Fp8x4ToBf16x4(uint32_t codes, uint32_t& lo, uint32_t& hi) {
  // Byte e_i to the high byte of its 16-bit lane: lo lanes {e0, e1}, hi lanes {e2, e3}.
  const uint32_t a = Prmt(codes, 0x1404u);
  const uint32_t b = Prmt(codes, 0x3424u);
  lo = TimesTwoTo120(((a >> 4) & 0x07ff07ffu) | (a & 0x80008000u));
  hi = TimesTwoTo120(((b >> 4) & 0x07ff07ffu) | (b & 0x80008000u));
}

// Four e4m3 codes -> two f16x2 words (lo = {e0, e1}, hi = {e2, e3}), each the code's exact value
// (every e4m3 value is an f16 value: 3 <= 10 mantissa bits, 2^-9..448 inside f16's range). sm_89+:
// two cvt.rn.f16x2.e4m3x2; elsewhere (sm_80, the emulator) the bf16 trick's layout for f16: the 7
// magnitude bits under the sign, shifted right by 1, are the f16 of the value times 2^-8, times
// 256 by one exact f16x2 multiply (subnormals kept: f16 arithmetic keeps them).
__device__ inline void Fp8x4ToF16x4(uint32_t codes, uint32_t& lo, uint32_t& hi) {
#if defined(TANDEM_CUDA_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890)
  const uint32_t a = Prmt(codes, 0x1404u);
  const uint32_t b = Prmt(codes, 0x3424u);
  const uint32_t la = ((a >> 1) & 0x3f803f80u) | (a & 0x80008000u);
  const uint32_t lb = ((b >> 1) & 0x3f803f80u) | (b & 0x80008000u);
#ifdef TANDEM_CUDA_EMU
  auto times256 = [](uint32_t w) {
    uint32_t out = 0;
    for (int h = 0; h < 2; ++h) {
      const uint32_t bits = (w >> (16 * h)) & 0xffffu;
      const __half x = __ushort_as_half(static_cast<unsigned short>(bits));
      const __half y = __float2half_rn(__half2float(x) * 256.0f);  // exact
      out |= static_cast<uint32_t>(__half_as_ushort(y)) << (16 * h);
    }
    return out;
  };
  lo = times256(la);
  hi = times256(lb);
#else
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(la), "r"(0x5c005c00u));  // 0x5c00: f16 256
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(lb), "r"(0x5c005c00u));
#endif
#else
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(codes));
#endif
}

// 16 codes (one 16-byte load) -> 8 bf16x2 words, word j = elements {2j, 2j + 1}.
__device__ inline void Fp8x16ToBf16x16(const uint4& v, uint32_t w[8]) {
  Fp8x4ToBf16x4(v.x, w[0], w[1]);
  Fp8x4ToBf16x4(v.y, w[2], w[3]);
  Fp8x4ToBf16x4(v.z, w[4], w[5]);
  Fp8x4ToBf16x4(v.w, w[6], w[7]);
}

// float -> e4m3 code, round to nearest even, saturating to +-448 (NaN -> 0x7f), as
// cpu::FloatToFp8E4M3 and __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3). The hardware
// conversion on sm_89+, else (sm_80, the CPU emulator) on the e4m3 grid in float: spacing
// 2^(e - 3) for |f| in [2^e, 2^(e+1)), e >= -6, and 2^-9 below 2^-6 (subnormals).
__host__ __device__ inline uint8_t FloatToFp8Soft(float f) {
  if (f != f) return 0x7f;
  const uint8_t sign = signbit(f) ? 0x80 : 0;
  float a = fminf(fabsf(f), kFp8Max);
  int e = 0;
  (void)frexpf(a, &e);  // a = m 2^e, m in [0.5, 1)
  e = e - 1 < -6 ? -6 : e - 1;
  const float step = ldexpf(1.0f, e - 3);
  a = fminf(rintf(a / step) * step, kFp8Max);  // rintf: ties to even; a / step is exact
  if (a == 0.0f) return sign;
  (void)frexpf(a, &e);
  const int field = e - 1 + 7;
  if (field <= 0) return static_cast<uint8_t>(sign | static_cast<int>(ldexpf(a, 9)));  // subnormal
  const int mant = static_cast<int>(ldexpf(a, 3 - (e - 1))) - 8;  // a = (8 + mant) 2^(e-1-3)
  return static_cast<uint8_t>(sign | (field << 3) | mant);
}

__device__ inline uint8_t FloatToFp8(float f) {
#if defined(TANDEM_CUDA_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890)
  return FloatToFp8Soft(f);
#else
  uint16_t pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
  return static_cast<uint8_t>(pair & 0xffu);
#endif
}

}  // namespace tandem::cuda::detail
