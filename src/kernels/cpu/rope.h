// Rotary position embedding, "neox" layout as HF Llama/Qwen apply_rotary_pos_emb:
//   x' = x * cos + rotate_half(x) * sin,  rotate_half([x1, x2]) = [-x2, x1]
// with cos/sin of (pos * inv_freq[i]) repeated over both halves of the head.
//
// inv_freq follows transformers' modeling_rope_utils.py in float32:
//   default: inv_freq[i] = 1 / theta^(float(2i) / d)
//   linear:  inv_freq / factor
//   llama3:  wavelen = 2*pi / inv_freq; wavelen > old_ctx/low_freq_factor -> inv_freq / factor;
//            wavelen < old_ctx/high_freq_factor -> unchanged; otherwise smoothed with
//            s = (old_ctx / wavelen - low) / (high - low): (1 - s) * inv_freq / factor + s * inv_freq
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::cpu {

struct RopeParams {
  double theta = 10000.0;
  std::string type = "default";  // default | linear | llama3 (the caller refuses others)
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// Returns inv_freq: [head_dim / 2].
std::vector<float> RopeInvFreq(int head_dim, const RopeParams& params);

// x: [num_tokens, num_heads, head_dim] rotated in place; positions: [num_tokens];
// inv_freq: [head_dim / 2].
void ApplyRope(float* x, int num_tokens, int num_heads, int head_dim, const int32_t* positions,
               const float* inv_freq);

// The same rotation in two steps, for a forward pass that rotates q and k of every layer at the
// same positions: RopeCosSin computes the angles' cos and sin once (cos, sin: [num_tokens,
// head_dim / 2], on the CPU pool), ApplyRopeCosSin rotates with them on the calling thread. The
// values are ApplyRope's, bit for bit.
void RopeCosSin(const int32_t* positions, int num_tokens, int head_dim, const float* inv_freq, float* cos,
                float* sin);
void ApplyRopeCosSin(float* x, int num_tokens, int num_heads, int head_dim, const float* cos, const float* sin);

}  // namespace tandem::cpu
