// Device weights for the CUDA runner (cuda_weights.h). Compiled for real only in the
// tandem_model_cuda target (TANDEM_HAVE_CUDA); tandem_model's glob sees an empty file.
#ifdef TANDEM_HAVE_CUDA

#include "model/cuda_weights.h"

#include <cuda_bf16.h>

#include <initializer_list>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/cuda_check.h"
#include "model/weights.h"

namespace tandem {

using bf16 = __nv_bfloat16;

Status DeviceArray::Allocate(size_t bytes) {
  Reset();
  if (bytes == 0) return Status::Ok();
  const cudaError_t e = cudaMalloc(&p_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear it: out of memory is an answer, not a sticky fault
    p_ = nullptr;
    return Err(StatusCode::kResourceExhausted, "cudaMalloc of {} bytes: out of device memory",
               bytes);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(e);
  bytes_ = bytes;
  return Status::Ok();
}

void DeviceArray::Reset() {
  if (p_ != nullptr) cudaFree(p_);
  p_ = nullptr;
  bytes_ = 0;
}

size_t CudaWeights::bytes() const {
  size_t n = embed.bytes() + final_norm.bytes() + lm_head.bytes() + inv_freq.bytes();
  for (const DeviceLayer& l : layers) {
    n += l.input_norm.bytes() + l.qkv.bytes() + l.qkv_bias.bytes() + l.o.bytes() +
         l.o_bias.bytes() + l.q_norm.bytes() + l.k_norm.bytes() + l.post_norm.bytes() +
         l.gate_up.bytes() + l.down.bytes();
  }
  return n;
}

namespace {

// fp32 host tensors, concatenated, uploaded as bf16 (round to nearest even: exact for the bf16
// checkpoints the CPU loader widened).
Status UploadBf16(std::initializer_list<const std::vector<float>*> parts, DeviceArray* dev) {
  size_t n = 0;
  for (const auto* p : parts) n += p->size();
  std::vector<bf16> host(n);
  size_t i = 0;
  for (const auto* p : parts) {
    for (float v : *p) host[i++] = __float2bfloat16_rn(v);
  }
  TANDEM_RETURN_IF_ERROR(dev->Allocate(n * sizeof(bf16)));
  if (n > 0) {
    TANDEM_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(dev->as<bf16>(), host.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
  }
  return Status::Ok();
}

}  // namespace

Result<CudaWeights> LoadCudaWeights(const SafetensorsModel& st, const ModelConfig& c) {
  TANDEM_ASSIGN_OR_RETURN(ModelWeights w, LoadModelWeights(st, c));
  CudaWeights out;
  TANDEM_RETURN_IF_ERROR(UploadBf16({&w.embed}, &out.embed));
  TANDEM_RETURN_IF_ERROR(UploadBf16({&w.final_norm}, &out.final_norm));
  if (!w.lm_head.empty()) TANDEM_RETURN_IF_ERROR(UploadBf16({&w.lm_head}, &out.lm_head));
  out.layers = std::vector<DeviceLayer>(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& s = w.layers[l];
    DeviceLayer& d = out.layers[l];
    TANDEM_RETURN_IF_ERROR(UploadBf16({&s.input_norm}, &d.input_norm));
    TANDEM_RETURN_IF_ERROR(UploadBf16({&s.q_proj, &s.k_proj, &s.v_proj}, &d.qkv));
    if (!s.q_bias.empty() || !s.k_bias.empty() || !s.v_bias.empty()) {
      // A missing part of the bias is zero.
      std::vector<float> qb = s.q_bias, kb = s.k_bias, vb = s.v_bias;
      qb.resize(static_cast<size_t>(c.num_attention_heads) * c.head_dim, 0.0f);
      kb.resize(static_cast<size_t>(c.num_key_value_heads) * c.head_dim, 0.0f);
      vb.resize(kb.size(), 0.0f);
      TANDEM_RETURN_IF_ERROR(UploadBf16({&qb, &kb, &vb}, &d.qkv_bias));
    }
    TANDEM_RETURN_IF_ERROR(UploadBf16({&s.o_proj}, &d.o));
    if (!s.o_bias.empty()) TANDEM_RETURN_IF_ERROR(UploadBf16({&s.o_bias}, &d.o_bias));
    if (!s.q_norm.empty()) TANDEM_RETURN_IF_ERROR(UploadBf16({&s.q_norm}, &d.q_norm));
    if (!s.k_norm.empty()) TANDEM_RETURN_IF_ERROR(UploadBf16({&s.k_norm}, &d.k_norm));
    TANDEM_RETURN_IF_ERROR(UploadBf16({&s.post_norm}, &d.post_norm));
    TANDEM_RETURN_IF_ERROR(UploadBf16({&s.gate_proj, &s.up_proj}, &d.gate_up));
    TANDEM_RETURN_IF_ERROR(UploadBf16({&s.down_proj}, &d.down));
  }
  cpu::RopeParams rope;
  rope.theta = c.rope_theta;
  rope.type = c.rope_scaling.type;
  rope.factor = c.rope_scaling.factor;
  rope.low_freq_factor = c.rope_scaling.low_freq_factor;
  rope.high_freq_factor = c.rope_scaling.high_freq_factor;
  rope.original_max_position_embeddings = c.rope_scaling.original_max_position_embeddings;
  const std::vector<float> inv_freq = cpu::RopeInvFreq(c.head_dim, rope);
  TANDEM_RETURN_IF_ERROR(out.inv_freq.Allocate(inv_freq.size() * sizeof(float)));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.inv_freq.as<float>(), inv_freq.data(),
                                         inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));
  return out;
}


}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
