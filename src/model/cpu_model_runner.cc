// The CPU reference ModelRunner (model_runner.h): fp32 forward of Llama-family decoders
// (Qwen3, Llama, Qwen2, Mistral) over a paged KV cache, following transformers' modeling_*.py.
//
// The weights stay in the checkpoint's dtype, in place in the mapped safetensors file the runner
// keeps (weights.h); activations are fp32. One step: all new tokens of all slices go through each
// projection as one cpu::Linear ([num_tokens, hidden] x W^T, kernels/cpu/matmul.h); attention runs
// per (slice, KV head, query chunk) over the slice's block table, on the CPU pool.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/logging.h"
#include "common/status.h"
#include "common/zeroed_pages.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/reshape_and_cache.h"
#include "kernels/cpu/rms_norm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/silu_mul.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_runner.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace tandem {
namespace {

// Query tokens of one attention task (with one KV head of one slice): prefill's attention splits
// across the pool's threads.
constexpr int kAttentionChunk = 128;

// v's data with room for n floats: grows v when it is smaller, never shrinks it.
float* Scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

class CpuModelRunner final : public ModelRunner {
 public:
  CpuModelRunner(ModelConfig config, ModelWeights weights, KvCacheDtype kv_dtype)
      : config_(std::move(config)), weights_(std::move(weights)), fp8_kv_(kv_dtype == KvCacheDtype::kFp8E4M3),
        kv_scale_(static_cast<size_t>(config_.num_key_value_heads), 1.0f) {
    cpu::RopeParams rope;
    rope.theta = config_.rope_theta;
    rope.type = config_.rope_scaling.type;
    rope.factor = config_.rope_scaling.factor;
    rope.low_freq_factor = config_.rope_scaling.low_freq_factor;
    rope.high_freq_factor = config_.rope_scaling.high_freq_factor;
    rope.original_max_position_embeddings = config_.rope_scaling.original_max_position_embeddings;
    inv_freq_ = cpu::RopeInvFreq(config_.head_dim, rope);
  }

  const ModelConfig& config() const override { return config_; }

  size_t KVBlockBytes(int block_size) const override {
    return static_cast<size_t>(config_.num_hidden_layers) * 2 * block_size *
           config_.num_key_value_heads * config_.head_dim * (fp8_kv_ ? 1 : sizeof(float));
  }
  std::string kv_cache_dtype() const override { return fp8_kv_ ? "fp8_e4m3" : "fp32"; }

  Status AllocateKVCache(int num_blocks, int block_size) override {
    if (num_blocks <= 0 || block_size <= 0) {
      return Err(StatusCode::kInvalidArgument, "KV cache needs num_blocks > 0 and block_size > 0,"
                 " got {} and {}", num_blocks, block_size);
    }
    kv_.clear();
    num_blocks_ = 0;
    block_size_ = 0;
    const long double bytes = static_cast<long double>(KVBlockBytes(1)) * block_size * num_blocks;
    if (bytes > static_cast<long double>(SIZE_MAX / 4)) {
      return Err(StatusCode::kResourceExhausted, "KV cache of {} blocks of {} tokens is too large",
                 num_blocks, block_size);
    }
    // Per layer, zero-filled pages that become resident when a block is first written: a pool
    // sized for max_model_len costs memory only for the tokens cached.
    const size_t per_layer = KVBlockBytes(block_size) / static_cast<size_t>(config_.num_hidden_layers) *
                             static_cast<size_t>(num_blocks);
    for (int l = 0; l < config_.num_hidden_layers; ++l) {
      Result<ZeroedPages> pool = ZeroedPages::Allocate(per_layer);
      if (!pool.ok()) {
        kv_.clear();
        return Err(StatusCode::kResourceExhausted, "cannot allocate a KV cache of {} blocks x {} bytes: {}",
                   num_blocks, KVBlockBytes(block_size), pool.status().message());
      }
      kv_.push_back(std::move(pool).value());
    }
    num_blocks_ = num_blocks;
    block_size_ = block_size;
    return Status::Ok();
  }

  KVCacheLayout kv_cache_layout() override {
    KVCacheLayout layout;
    if (kv_.empty()) return layout;
    for (auto& pool : kv_) layout.layer_base.push_back(pool.data());
    layout.block_bytes = KVBlockBytes(block_size_) / static_cast<size_t>(config_.num_hidden_layers);
    layout.num_blocks = num_blocks_;
    layout.dtype = kv_cache_dtype();
    return layout;
  }

  Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override;

 private:
  Status Validate(const ForwardBatch& batch) const;

  ModelConfig config_;
  ModelWeights weights_;
  std::vector<float> inv_freq_;                 // [head_dim / 2]
  bool fp8_kv_ = false;                         // --kv-cache-dtype fp8: FP8 E4M3 codes, not fp32
  std::vector<float> kv_scale_;                 // [kv_heads]: K and V scales (1.0: uncalibrated)
  std::vector<ZeroedPages> kv_;                 // per layer [num_blocks, 2, block, kv_heads, hd]
  // Forward's activations, kept across steps (Forward runs on one thread at a time).
  struct Activations {
    std::vector<float> x, xn, q, k, v, attn, proj, gate, up, sel;
  } act_;
  int num_blocks_ = 0;
  int block_size_ = 0;
};

Status CpuModelRunner::Validate(const ForwardBatch& batch) const {
  if (kv_.empty()) {
    return Err(StatusCode::kFailedPrecondition, "Forward before AllocateKVCache");
  }
  return ValidateForwardBatch(batch, config_, block_size_, num_blocks_);
}

Status CpuModelRunner::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  TANDEM_RETURN_IF_ERROR(Validate(batch));
  const ModelConfig& c = config_;
  const int hidden = c.hidden_size;
  const int nh = c.num_attention_heads;
  const int nkv = c.num_key_value_heads;
  const int hd = c.head_dim;
  const int q_dim = nh * hd;
  const int kv_dim = nkv * hd;
  const int inter = c.intermediate_size;
  const float eps = static_cast<float>(c.rms_norm_eps);

  // Flatten the batch: token t of the step has id, position, slot; rows that want logits.
  std::vector<int32_t> ids, positions;
  std::vector<int64_t> slots;
  std::vector<int> seq_offset;     // first token index of each slice
  std::vector<int> logit_rows;     // token indices whose logits are returned, in order
  for (const SequenceSlice& seq : batch.seqs) {
    seq_offset.push_back(static_cast<int>(ids.size()));
    const int n = static_cast<int>(seq.token_ids.size());
    for (int i = 0; i < n; ++i) {
      const int pos = seq.start_pos + i;
      const int t = static_cast<int>(ids.size());
      ids.push_back(seq.token_ids[i]);
      positions.push_back(pos);
      slots.push_back(static_cast<int64_t>(seq.block_table[pos / block_size_]) * block_size_ +
                      pos % block_size_);
      if (seq.logits == SequenceSlice::Logits::kAll ||
          (seq.logits == SequenceSlice::Logits::kLast && i == n - 1)) {
        logit_rows.push_back(t);
      }
    }
  }
  const int T = static_cast<int>(ids.size());
  logits->clear();
  if (T == 0) return Status::Ok();

  // Activations in buffers kept across steps (grown, never shrunk: no allocation, page fault or
  // zero fill per step).
  float* x = Scratch(act_.x, static_cast<size_t>(T) * hidden);        // [T, hidden] residual stream
  float* xn = Scratch(act_.xn, static_cast<size_t>(T) * hidden);      // [T, hidden] normed
  float* q = Scratch(act_.q, static_cast<size_t>(T) * q_dim);         // [T, nh, hd]
  float* k = Scratch(act_.k, static_cast<size_t>(T) * kv_dim);        // [T, nkv, hd]
  float* v = Scratch(act_.v, static_cast<size_t>(T) * kv_dim);        // [T, nkv, hd]
  float* attn = Scratch(act_.attn, static_cast<size_t>(T) * q_dim);   // [T, nh, hd]
  float* proj = Scratch(act_.proj, static_cast<size_t>(T) * hidden);  // [T, hidden]
  float* gate = Scratch(act_.gate, static_cast<size_t>(T) * inter);   // [T, inter]
  float* up = Scratch(act_.up, static_cast<size_t>(T) * inter);       // [T, inter]
  const size_t x_size = static_cast<size_t>(T) * hidden;
  // Attention tasks for the pool: (slice, KV head, chunk of the slice's query tokens).
  struct AttentionTask {
    int seq, kv_head, t0, t1;
  };
  std::vector<AttentionTask> attention_tasks;
  for (size_t s = 0; s < batch.seqs.size(); ++s) {
    const int n = static_cast<int>(batch.seqs[s].token_ids.size());
    for (int h = 0; h < nkv; ++h) {
      for (int t0 = 0; t0 < n; t0 += kAttentionChunk) {
        attention_tasks.push_back({static_cast<int>(s), h, t0, std::min(n, t0 + kAttentionChunk)});
      }
    }
  }
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };

  cpu::Embedding(ids.data(), T, weights_.embed.matrix(), x);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    float* pool = fp8_kv_ ? nullptr : static_cast<float*>(kv_[layer].data());
    uint8_t* pool8 = fp8_kv_ ? static_cast<uint8_t*>(kv_[layer].data()) : nullptr;
    cpu::RmsNorm(x, w.input_norm.data(), T, hidden, eps, xn);
    cpu::Linear(xn, T, w.q_proj.matrix(), bias(w.q_bias), q);
    cpu::Linear(xn, T, w.k_proj.matrix(), bias(w.k_bias), k);
    cpu::Linear(xn, T, w.v_proj.matrix(), bias(w.v_bias), v);
    if (c.qk_norm) {  // Qwen3: RMSNorm over each head's head_dim
      cpu::RmsNorm(q, w.q_norm.data(), T * nh, hd, eps, q);
      cpu::RmsNorm(k, w.k_norm.data(), T * nkv, hd, eps, k);
    }
    cpu::ApplyRope(q, T, nh, hd, positions.data(), inv_freq_.data());
    cpu::ApplyRope(k, T, nkv, hd, positions.data(), inv_freq_.data());
    if (fp8_kv_) {
      cpu::ReshapeAndCacheFp8(k, v, T, slots.data(), block_size_, nkv, hd, kv_scale_.data(),
                              kv_scale_.data(), pool8);
    } else {
      cpu::ReshapeAndCache(k, v, T, slots.data(), block_size_, nkv, hd, pool);
    }
    if (batch.on_layer_kv_written) batch.on_layer_kv_written(LayerKVReady{layer, [] { return true; }, {}});
    cpu::ParallelFor(static_cast<int>(attention_tasks.size()), [&](int i) {
      const AttentionTask& t = attention_tasks[i];
      const SequenceSlice& seq = batch.seqs[t.seq];
      const size_t first = static_cast<size_t>(seq_offset[t.seq] + t.t0) * q_dim;
      cpu::PagedAttentionArgs a;
      a.q = q + first;
      a.num_tokens = t.t1 - t.t0;
      a.start_pos = seq.start_pos + t.t0;
      a.kv_pool = pool;
      a.kv_pool_fp8 = pool8;
      a.k_scale = a.v_scale = kv_scale_.data();
      a.block_table = seq.block_table.data();
      a.block_size = block_size_;
      a.num_heads = nh;
      a.num_kv_heads = nkv;
      a.head_dim = hd;
      a.scale = scale;
      a.out = attn + first;
      a.kv_head_begin = t.kv_head;
      a.kv_head_end = t.kv_head + 1;
      cpu::PagedAttention(a);
    });
    cpu::Linear(attn, T, w.o_proj.matrix(), bias(w.o_bias), proj);
    for (size_t i = 0; i < x_size; ++i) x[i] += proj[i];
    cpu::RmsNorm(x, w.post_norm.data(), T, hidden, eps, xn);
    cpu::Linear(xn, T, w.gate_proj.matrix(), nullptr, gate);
    cpu::Linear(xn, T, w.up_proj.matrix(), nullptr, up);
    cpu::SiluMul(gate, up, static_cast<long>(T) * inter, gate);
    cpu::Linear(gate, T, w.down_proj.matrix(), nullptr, proj);
    for (size_t i = 0; i < x_size; ++i) x[i] += proj[i];
  }

  // Final norm and lm_head only on the rows that return logits.
  const int R = static_cast<int>(logit_rows.size());
  if (R == 0) return Status::Ok();
  float* sel = Scratch(act_.sel, static_cast<size_t>(R) * hidden);  // [R, hidden]
  for (int r = 0; r < R; ++r) {
    const float* src = x + static_cast<size_t>(logit_rows[r]) * hidden;
    std::copy(src, src + hidden, sel + static_cast<size_t>(r) * hidden);
  }
  cpu::RmsNorm(sel, weights_.final_norm.data(), R, hidden, eps, sel);
  logits->resize(static_cast<size_t>(R) * c.vocab_size);
  cpu::Linear(sel, R, weights_.lm_head_or_embed().matrix(), nullptr, logits->data());
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ModelRunner>> LoadCpuModelRunner(const std::string& model_dir,
                                                        const std::string& quantization,
                                                        const std::string& kv_cache_dtype) {
  TANDEM_ASSIGN_OR_RETURN(KvCacheDtype kv_dtype, ParseKvCacheDtype(kv_cache_dtype));
  TANDEM_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  TANDEM_ASSIGN_OR_RETURN(config.quantization, ResolveQuantization(config.quantization, quantization));
  if (config.quantization.enabled()) {
    log::info("weights: {}, dequantized to fp32 for the CPU engine", config.quantization.Describe());
  }
  TANDEM_ASSIGN_OR_RETURN(SafetensorsModel st, SafetensorsModel::Open(model_dir));
  TANDEM_ASSIGN_OR_RETURN(ModelWeights weights,
                          LoadModelWeights(std::make_shared<const SafetensorsModel>(std::move(st)), config));
  const cpu::WeightMatrix head = weights.lm_head_or_embed().matrix();
  log::info("CPU weights: {:.1f} MiB ({} matrices{}; lm_head {}{}), kernels {}",
            static_cast<double>(weights.bytes()) / (1 << 20), cpu::WeightTypeName(weights.embed.matrix().type),
            weights.embed.owned.empty() ? " in place in the checkpoint's mapping" : "",
            cpu::WeightTypeName(head.type), weights.lm_head.empty() ? ", tied to the embedding" : "",
            cpu::LinearIsaName(cpu::ActiveLinearIsa()));
  if (kv_dtype == KvCacheDtype::kFp8E4M3) {
    log::info("KV cache: FP8 E4M3 (scale 1.0 per layer and KV head), a quarter of the fp32 pool's bytes");
  }
  return std::unique_ptr<ModelRunner>(
      std::make_unique<CpuModelRunner>(std::move(config), std::move(weights), kv_dtype));
}

}  // namespace tandem
