// The CUDA ModelRunner (cuda_model_runner.h). Compiled for real only in the tandem_model_cuda
// target (CMake defines TANDEM_HAVE_CUDA there); tandem_model's glob sees an empty file.
//
// One step: all new tokens of all slices go through each projection as one cuBLAS GEMM, the
// residual stream stays on the GPU in bf16 (vLLM's fused_add_rms_norm layout), attention runs once
// per layer for the whole batch (PagedDecode when every slice has one token, else PagedPrefill).
#ifdef TANDEM_HAVE_CUDA

#include "model/cuda_model_runner.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/qk_norm_rope.h"
#include "kernels/cuda/reshape_and_cache.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/silu_mul.h"
#include "model/cuda_weights.h"
#include "model/safetensors.h"

namespace tandem {
namespace {

using bf16 = __nv_bfloat16;

class CudaModelRunner final : public ModelRunner {
 public:
  CudaModelRunner(ModelConfig config, int device_id, CudaWeights weights, cuda::CublasHandle cublas,
                  cudaStream_t stream)
      : config_(std::move(config)), device_id_(device_id), w_(std::move(weights)),
        cublas_(std::move(cublas)), stream_(stream) {}
  ~CudaModelRunner() override {
    cudaSetDevice(device_id_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }


  const ModelConfig& config() const override { return config_; }

  size_t KVBlockBytes(int block_size) const override {
    return static_cast<size_t>(config_.num_hidden_layers) * 2 * block_size *
           config_.num_key_value_heads * config_.head_dim * sizeof(bf16);
  }

  Status AllocateKVCache(int num_blocks, int block_size) override;
  KVCacheLayout kv_cache_layout() override;
  Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override;

 private:
  Status Validate(const ForwardBatch& batch) const;

  ModelConfig config_;
  int device_id_;
  CudaWeights w_;
  cuda::CublasHandle cublas_;
  cudaStream_t stream_;
  std::vector<DeviceArray> kv_;  // per layer [num_blocks, 2, block_size, nkv, hd]
  int num_blocks_ = 0;
  int block_size_ = 0;
  // Step scratch, grown on demand.
  DeviceArray meta_, residual_, hidden_, qkv_, attn_, gate_up_, act_, sel_, logits_, workspace_;
};

Status CudaModelRunner::AllocateKVCache(int num_blocks, int block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return Err(StatusCode::kInvalidArgument, "KV cache needs num_blocks > 0 and block_size > 0, "
               "got {} and {}", num_blocks, block_size);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id_));
  kv_.clear();
  num_blocks_ = 0;
  block_size_ = 0;
  const size_t per_layer = KVBlockBytes(block_size) / config_.num_hidden_layers * num_blocks;
  std::vector<DeviceArray> pools(config_.num_hidden_layers);
  for (DeviceArray& pool : pools) {
    Status st = pool.Allocate(per_layer);
    if (!st.ok()) {
      return Status(st.code(), fmt::format("KV cache of {} blocks x {} bytes: {}", num_blocks,
                                           KVBlockBytes(block_size), st.message()));
    }
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemset(pool.as<void>(), 0, per_layer));
  }
  kv_ = std::move(pools);
  num_blocks_ = num_blocks;
  block_size_ = block_size;
  return Status::Ok();
}

KVCacheLayout CudaModelRunner::kv_cache_layout() {
  KVCacheLayout layout;
  if (kv_.empty()) return layout;
  for (DeviceArray& pool : kv_) layout.layer_base.push_back(pool.as<void>());
  layout.block_bytes = KVBlockBytes(block_size_) / kv_.size();
  layout.num_blocks = num_blocks_;
  layout.device_id = device_id_;
  return layout;
}

Status CudaModelRunner::Validate(const ForwardBatch& batch) const {
  if (kv_.empty()) return Err(StatusCode::kFailedPrecondition, "Forward before AllocateKVCache");
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const SequenceSlice& seq = batch.seqs[s];
    const int64_t n = static_cast<int64_t>(seq.token_ids.size());
    if (n == 0) return Err(StatusCode::kInvalidArgument, "seq {}: no tokens in the slice", s);
    if (seq.start_pos < 0) {
      return Err(StatusCode::kInvalidArgument, "seq {}: negative start_pos {}", s, seq.start_pos);
    }
    const int64_t end = static_cast<int64_t>(seq.start_pos) + n;
    if (end > config_.max_position_embeddings) {
      return Err(StatusCode::kInvalidArgument,
                 "seq {}: positions up to {} exceed max_position_embeddings {}", s, end - 1,
                 config_.max_position_embeddings);
    }
    for (int32_t id : seq.token_ids) {
      if (id < 0 || id >= config_.vocab_size) {
        return Err(StatusCode::kInvalidArgument, "seq {}: token id {} outside the vocab [0, {})",
                   s, id, config_.vocab_size);
      }
    }
    const int64_t blocks_needed = (end + block_size_ - 1) / block_size_;
    if (static_cast<int64_t>(seq.block_table.size()) < blocks_needed) {
      return Err(StatusCode::kInvalidArgument,
                 "seq {}: block table has {} blocks, positions [0, {}) need {} of {} tokens", s,
                 seq.block_table.size(), end, blocks_needed, block_size_);
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      const int32_t id = seq.block_table[b];
      if (id < 0 || id >= num_blocks_) {
        return Err(StatusCode::kInvalidArgument, "seq {}: block id {} outside the pool [0, {})", s,
                   id, num_blocks_);
      }
    }
  }
  return Status::Ok();
}

// Host-side description of a step, packed into one upload.
struct StepMeta {
  std::vector<int32_t> ids, positions, query_start_loc, start_pos, context_lens, block_tables,
      logit_rows;
  std::vector<int64_t> slots;
  int max_blocks = 1, max_query_len = 0, max_context_len = 0;
  bool all_decode = true;
};

size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

Status CudaModelRunner::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  TANDEM_RETURN_IF_ERROR(Validate(batch));
  logits->clear();
  const ModelConfig& c = config_;
  const int hidden = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int hd = c.head_dim, inter = c.intermediate_size, vocab = c.vocab_size;
  const int q_dim = nh * hd, qkv_dim = (nh + 2 * nkv) * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int num_seqs = static_cast<int>(batch.seqs.size());

  StepMeta m;
  m.query_start_loc.push_back(0);
  for (const SequenceSlice& seq : batch.seqs) {
    const int n = static_cast<int>(seq.token_ids.size());
    m.max_blocks = std::max(m.max_blocks, (seq.start_pos + n + block_size_ - 1) / block_size_);
  }
  m.block_tables.assign(static_cast<size_t>(num_seqs) * m.max_blocks, 0);
  for (int s = 0; s < num_seqs; ++s) {
    const SequenceSlice& seq = batch.seqs[s];
    const int n = static_cast<int>(seq.token_ids.size());
    const int blocks = (seq.start_pos + n + block_size_ - 1) / block_size_;
    std::copy_n(seq.block_table.begin(), blocks, m.block_tables.begin() + s * m.max_blocks);
    for (int i = 0; i < n; ++i) {
      const int pos = seq.start_pos + i;
      const int t = static_cast<int>(m.ids.size());
      m.ids.push_back(seq.token_ids[i]);
      m.positions.push_back(pos);
      m.slots.push_back(static_cast<int64_t>(seq.block_table[pos / block_size_]) * block_size_ +
                        pos % block_size_);
      if (seq.logits == SequenceSlice::Logits::kAll ||
          (seq.logits == SequenceSlice::Logits::kLast && i == n - 1)) {
        m.logit_rows.push_back(t);
      }
    }
    m.query_start_loc.push_back(static_cast<int32_t>(m.ids.size()));
    m.start_pos.push_back(seq.start_pos);
    m.context_lens.push_back(seq.start_pos + n);
    m.max_query_len = std::max(m.max_query_len, n);
    m.max_context_len = std::max(m.max_context_len, seq.start_pos + n);
    m.all_decode = m.all_decode && n == 1;
  }
  const int T = static_cast<int>(m.ids.size());
  const int R = static_cast<int>(m.logit_rows.size());
  if (T == 0) return Status::Ok();

  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id_));
  // One upload of every int array (16-byte aligned offsets).
  std::vector<char> host;
  auto pack = [&host](const auto& v) {
    const size_t off = host.size();
    const size_t bytes = v.size() * sizeof(v[0]);
    host.resize(Align16(off + bytes));
    if (bytes > 0) std::memcpy(host.data() + off, v.data(), bytes);
    return off;
  };
  const size_t o_slots = pack(m.slots), o_ids = pack(m.ids), o_pos = pack(m.positions),
               o_qsl = pack(m.query_start_loc), o_start = pack(m.start_pos),
               o_ctx = pack(m.context_lens), o_tables = pack(m.block_tables),
               o_rows = pack(m.logit_rows);
  TANDEM_RETURN_IF_ERROR(meta_.Reserve(host.size()));
  TANDEM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(meta_.as<char>(), host.data(), host.size(), cudaMemcpyHostToDevice, stream_));
  auto at = [this](size_t off) { return meta_.as<char>() + off; };
  const auto* d_slots = reinterpret_cast<const int64_t*>(at(o_slots));
  const auto* d_ids = reinterpret_cast<const int32_t*>(at(o_ids));
  const auto* d_pos = reinterpret_cast<const int32_t*>(at(o_pos));
  const auto* d_qsl = reinterpret_cast<const int32_t*>(at(o_qsl));
  const auto* d_start = reinterpret_cast<const int32_t*>(at(o_start));
  const auto* d_ctx = reinterpret_cast<const int32_t*>(at(o_ctx));
  const auto* d_tables = reinterpret_cast<const int32_t*>(at(o_tables));
  const auto* d_rows = reinterpret_cast<const int32_t*>(at(o_rows));

  const size_t t = static_cast<size_t>(T);
  TANDEM_RETURN_IF_ERROR(residual_.Reserve(t * hidden * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(hidden_.Reserve(t * hidden * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(qkv_.Reserve(t * qkv_dim * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(attn_.Reserve(t * q_dim * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(gate_up_.Reserve(t * 2 * inter * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(act_.Reserve(t * inter * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(sel_.Reserve(static_cast<size_t>(std::max(R, 1)) * hidden * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(logits_.Reserve(static_cast<size_t>(std::max(R, 1)) * vocab * sizeof(float)));
  const size_t ws_bytes = m.all_decode ? cuda::PagedDecodeWorkspaceBytes(num_seqs, nh, hd,
                                                                         m.max_context_len)
                                       : 0;
  TANDEM_RETURN_IF_ERROR(workspace_.Reserve(ws_bytes));
  bf16* x = residual_.as<bf16>();  // [T, hidden] residual stream
  bf16* h = hidden_.as<bf16>();    // [T, hidden] normed input / projection output
  bf16* qkv = qkv_.as<bf16>();     // [T, qkv_dim]: q [nh, hd], k [nkv, hd], v [nkv, hd]
  bf16* attn = attn_.as<bf16>();   // [T, nh, hd]
  bf16* gate_up = gate_up_.as<bf16>();  // [T, 2 * inter]
  bf16* act = act_.as<bf16>();     // [T, inter]

  auto linear = [&](const bf16* in, int k, const DeviceArray& w, const DeviceArray& bias, void* out,
                    int n, cuda::OutDtype dtype, int rows) {
    cuda::LinearArgs a;
    a.x = in;
    a.ldx = k;
    a.w = w.as<bf16>();
    a.bias = bias.bytes() > 0 ? bias.as<bf16>() : nullptr;
    a.y = out;
    a.ldy = n;
    a.out_dtype = dtype;
    a.m = rows;
    a.n = n;
    a.k = k;
    return cuda::Linear(cublas_, a, stream_);
  };
  auto norm = [&](const bf16* in, const DeviceArray& w, bf16* out, bool fused) {
    cuda::RmsNormArgs a;
    a.x = in;
    a.x_stride = hidden;
    a.residual = fused ? x : nullptr;
    a.res_stride = hidden;
    a.weight = w.as<bf16>();
    a.y = out;
    a.y_stride = hidden;
    a.num_rows = T;
    a.dim = hidden;
    a.eps = eps;
    return fused ? cuda::FusedAddRmsNorm(a, stream_) : cuda::RmsNorm(a, stream_);
  };
  const DeviceArray kNone;

  TANDEM_RETURN_IF_ERROR(cuda::Embedding(d_ids, T, w_.embed.as<bf16>(), vocab, hidden, x, stream_));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const DeviceLayer& w = w_.layers[l];
    // h holds the previous layer's MLP output: residual += h; h = norm(residual).
    TANDEM_RETURN_IF_ERROR(l == 0 ? norm(x, w.input_norm, h, false)
                                  : norm(h, w.input_norm, h, true));
    TANDEM_RETURN_IF_ERROR(linear(h, hidden, w.qkv, w.qkv_bias, qkv, qkv_dim, cuda::OutDtype::kBf16, T));
    cuda::QkNormRopeArgs r;
    r.q = qkv;
    r.q_stride = qkv_dim;
    r.k = qkv + q_dim;
    r.k_stride = qkv_dim;
    r.q_norm = w.q_norm.bytes() > 0 ? w.q_norm.as<bf16>() : nullptr;
    r.k_norm = w.k_norm.bytes() > 0 ? w.k_norm.as<bf16>() : nullptr;
    r.positions = d_pos;
    r.inv_freq = w_.inv_freq.as<float>();
    r.num_tokens = T;
    r.num_heads = nh;
    r.num_kv_heads = nkv;
    r.head_dim = hd;
    r.eps = eps;
    TANDEM_RETURN_IF_ERROR(cuda::QkNormRope(r, stream_));
    cuda::ReshapeAndCacheArgs kvw;
    kvw.k = qkv + q_dim;
    kvw.k_stride = qkv_dim;
    kvw.v = qkv + q_dim + nkv * hd;
    kvw.v_stride = qkv_dim;
    kvw.slot_mapping = d_slots;
    kvw.kv_pool = kv_[l].as<bf16>();
    kvw.num_tokens = T;
    kvw.block_size = block_size_;
    kvw.num_kv_heads = nkv;
    kvw.head_dim = hd;
    TANDEM_RETURN_IF_ERROR(cuda::ReshapeAndCache(kvw, stream_));
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    if (m.all_decode) {
      cuda::PagedDecodeArgs a;
      a.q = qkv;
      a.q_stride = qkv_dim;
      a.out = attn;
      a.out_stride = q_dim;
      a.kv_pool = kv_[l].as<bf16>();
      a.context_lens = d_ctx;
      a.block_tables = d_tables;
      a.block_table_stride = m.max_blocks;
      a.num_seqs = num_seqs;
      a.max_context_len = m.max_context_len;
      a.block_size = block_size_;
      a.num_heads = nh;
      a.num_kv_heads = nkv;
      a.head_dim = hd;
      a.scale = scale;
      a.workspace = workspace_.as<void>();
      a.workspace_bytes = workspace_.bytes();
      TANDEM_RETURN_IF_ERROR(cuda::PagedDecode(a, stream_));
    } else {
      cuda::PagedPrefillArgs a;
      a.q = qkv;
      a.q_stride = qkv_dim;
      a.out = attn;
      a.out_stride = q_dim;
      a.kv_pool = kv_[l].as<bf16>();
      a.query_start_loc = d_qsl;
      a.start_pos = d_start;
      a.block_tables = d_tables;
      a.block_table_stride = m.max_blocks;
      a.num_seqs = num_seqs;
      a.max_query_len = m.max_query_len;
      a.block_size = block_size_;
      a.num_heads = nh;
      a.num_kv_heads = nkv;
      a.head_dim = hd;
      a.scale = scale;
      TANDEM_RETURN_IF_ERROR(cuda::PagedPrefill(a, stream_));
    }
    TANDEM_RETURN_IF_ERROR(linear(attn, q_dim, w.o, w.o_bias, h, hidden, cuda::OutDtype::kBf16, T));
    TANDEM_RETURN_IF_ERROR(norm(h, w.post_norm, h, true));  // residual += attn out
    TANDEM_RETURN_IF_ERROR(
        linear(h, hidden, w.gate_up, kNone, gate_up, 2 * inter, cuda::OutDtype::kBf16, T));
    cuda::SiluMulArgs sm;
    sm.gate = gate_up;
    sm.gate_stride = 2 * inter;
    sm.up = gate_up + inter;
    sm.up_stride = 2 * inter;
    sm.out = act;
    sm.out_stride = inter;
    sm.num_tokens = T;
    sm.dim = inter;
    TANDEM_RETURN_IF_ERROR(cuda::SiluMul(sm, stream_));
    TANDEM_RETURN_IF_ERROR(linear(act, inter, w.down, kNone, h, hidden, cuda::OutDtype::kBf16, T));
  }
  if (R == 0) {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return Status::Ok();
  }
  // residual += last MLP out; final norm; the logit rows gathered (Embedding as a row gather).
  TANDEM_RETURN_IF_ERROR(norm(h, w_.final_norm, h, true));
  TANDEM_RETURN_IF_ERROR(cuda::Embedding(d_rows, R, h, T, hidden, sel_.as<bf16>(), stream_));
  const DeviceArray& head = w_.lm_head_or_embed();
  TANDEM_RETURN_IF_ERROR(linear(sel_.as<bf16>(), hidden, head, kNone, logits_.as<float>(), vocab,
                                cuda::OutDtype::kFloat32, R));
  logits->resize(static_cast<size_t>(R) * vocab);
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits->data(), logits_.as<float>(),
                                              logits->size() * sizeof(float),
                                              cudaMemcpyDeviceToHost, stream_));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ModelRunner>> LoadCudaModelRunner(const std::string& model_dir,
                                                         int device_id) {
  TANDEM_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  if (config.head_dim != 64 && config.head_dim != 128) {
    return Err(StatusCode::kUnimplemented, "CUDA runner: head_dim {} (the prefill kernel has 64 "
               "and 128)", config.head_dim);
  }
  int count = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (device_id < 0 || device_id >= count) {
    return Err(StatusCode::kInvalidArgument, "CUDA device {} does not exist ({} present)",
               device_id, count);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id));
  TANDEM_ASSIGN_OR_RETURN(SafetensorsModel st, SafetensorsModel::Open(model_dir));
  TANDEM_ASSIGN_OR_RETURN(CudaWeights weights, LoadCudaWeights(st, config));
  TANDEM_ASSIGN_OR_RETURN(cuda::CublasHandle cublas, cuda::CublasHandle::Create());
  cudaStream_t stream = nullptr;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto runner = std::make_unique<CudaModelRunner>(std::move(config), device_id, std::move(weights),
                                                  std::move(cublas), stream);
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
