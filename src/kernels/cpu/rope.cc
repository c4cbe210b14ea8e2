#include "kernels/cpu/rope.h"

#include <cmath>
#include <numbers>

#include "kernels/cpu/thread_pool.h"

namespace tandem::cpu {

std::vector<float> RopeInvFreq(int head_dim, const RopeParams& p) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq(half);
  const float theta = static_cast<float>(p.theta);
  for (int i = 0; i < half; ++i) {
    // torch: base ** (arange(0, d, 2).float() / d), float32 throughout.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(theta), exponent));
    inv_freq[i] = 1.0f / power;
  }
  if (p.type == "linear") {
    const float factor = static_cast<float>(p.factor);
    for (float& f : inv_freq) f = f / factor;
  } else if (p.type == "llama3") {
    const float factor = static_cast<float>(p.factor);
    const float low = static_cast<float>(p.low_freq_factor);
    const float high = static_cast<float>(p.high_freq_factor);
    const float old_ctx = static_cast<float>(p.original_max_position_embeddings);
    const float low_freq_wavelen = static_cast<float>(p.original_max_position_embeddings /
                                                      p.low_freq_factor);
    const float high_freq_wavelen = static_cast<float>(p.original_max_position_embeddings /
                                                       p.high_freq_factor);
    const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
    for (float& f : inv_freq) {
      const float wavelen = two_pi / f;
      const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_ctx / wavelen - low) / (high - low);
        f = (1.0f - smooth) * scaled / factor + smooth * scaled;
      } else {
        f = scaled;
      }
    }
  }
  return inv_freq;
}

namespace {

// cos and sin of pos * inv_freq[i] (one fp32 product, as HF's outer product), through double.
void CosSinRow(float pos, int half, const float* inv_freq, float* cos_v, float* sin_v) {
  for (int i = 0; i < half; ++i) {
    const float angle = pos * inv_freq[i];
    cos_v[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
    sin_v[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
  }
}

// One token's heads rotated by its cos_v / sin_v.
void RotateToken(float* x, int num_heads, int head_dim, const float* cos_v, const float* sin_v) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<long>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float x1 = v[i];
      const float x2 = v[i + half];
      const float a = x1 * cos_v[i];
      const float b = x2 * sin_v[i];
      const float c = x2 * cos_v[i];
      const float d = x1 * sin_v[i];
      v[i] = a - b;
      v[i + half] = c + d;
    }
  }
}

}  // namespace

void ApplyRope(float* x, int num_tokens, int num_heads, int head_dim, const int32_t* positions,
               const float* inv_freq) {
  const int half = head_dim / 2;
  // Tokens on the CPU pool (each token's arithmetic unchanged).
  ParallelForRange(num_tokens, 16, [&](int64_t t_begin, int64_t t_end) {
    std::vector<float> cos_v(half), sin_v(half);
    for (int64_t t = t_begin; t < t_end; ++t) {
      CosSinRow(static_cast<float>(positions[t]), half, inv_freq, cos_v.data(), sin_v.data());
      RotateToken(x + t * num_heads * head_dim, num_heads, head_dim, cos_v.data(), sin_v.data());
    }
  });
}

void RopeCosSin(const int32_t* positions, int num_tokens, int head_dim, const float* inv_freq, float* cos,
                float* sin) {
  const int half = head_dim / 2;
  ParallelForRange(num_tokens, 32, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      CosSinRow(static_cast<float>(positions[t]), half, inv_freq, cos + t * half, sin + t * half);
    }
  });
}

void ApplyRopeCosSin(float* x, int num_tokens, int num_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int64_t t = 0; t < num_tokens; ++t) {
    RotateToken(x + t * num_heads * head_dim, num_heads, head_dim, cos + t * half, sin + t * half);
  }
}

}  // namespace tandem::cpu
