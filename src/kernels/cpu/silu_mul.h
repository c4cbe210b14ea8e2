// SwiGLU activation of HF LlamaMLP / Qwen3MLP: out = silu(gate) * up, silu(x) = x / (1 + e^-x).
#pragma once

namespace tandem::cpu {

// gate, up, out: [n] (flattened [num_tokens, intermediate]); out may alias gate or up.
void SiluMul(const float* gate, const float* up, long n, float* out);
// The same on the calling thread (SiluMul splits n across the CPU pool); the same values.
void SiluMulSerial(const float* gate, const float* up, long n, float* out);

}  // namespace tandem::cpu
