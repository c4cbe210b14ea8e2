// The CPU reference ModelRunner (model_runner.h): fp32 forward of Llama-family decoders
// (Qwen3, Llama, Qwen2, Mistral) over a paged KV cache, following transformers' modeling_*.py.
//
// The weights stay in the checkpoint's dtype, in place in the mapped safetensors file the runner
// keeps (weights.h); activations are fp32. A step of few tokens (decode) runs one operation at a time,
// each split across the CPU pool: all new tokens of all slices go through each projection as one
// cpu::Linear ([num_tokens, hidden] x W^T, kernels/cpu/matmul.h) whose weight rows the threads share.
// A step of many tokens (prefill) gives each task a block of tokens through all of a layer's
// token-wise work with whole weights (the same arithmetic per element). Attention runs per (slice,
// KV head, query chunk) over the slice's block table, on the CPU pool.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
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
#include "model/kv_scales.h"
#include "model/model_runner.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace tandem {
namespace {

// Query tokens of one attention task (with one KV head of one slice): prefill's attention splits
// across the pool's threads.
constexpr int kAttentionChunk = 64;
// Steps of at least this many tokens take the token-wise path (TokenBlock).
constexpr int kTokenPathMin = 32;

// Tokens a task of the token-wise path takes (Forward), or 0: the operation-at-a-time path, each
// operation split across the pool by rows of its weight (few tokens: the weights' bytes dominate,
// and every thread reads only its share of them). TANDEM_CPU_TOKEN_BLOCK=N forces N (0: off).
int TokenBlock(int num_tokens, int threads) {
  static const int forced = [] {
    const char* e = std::getenv("TANDEM_CPU_TOKEN_BLOCK");
    return e != nullptr ? std::atoi(e) : -1;
  }();
  if (forced >= 0) return forced;
  if (num_tokens < kTokenPathMin) return 0;
  // Up to 64 tokens a block (each block reads every weight; larger blocks amortize that and run
  // the GEMM kernels at their best), and at least a block a thread.
  const int per = (num_tokens + threads - 1) / threads;
  return std::clamp(per, 16, 64);
}

// v's data with room for n floats: grows v when it is smaller, never shrinks it.
float* Scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

class CpuModelRunner final : public ModelRunner {
 public:
  CpuModelRunner(ModelConfig config, ModelWeights weights, KvCacheDtype kv_dtype, KvCacheScales kv_scales)
      : config_(std::move(config)), weights_(std::move(weights)), fp8_kv_(kv_dtype == KvCacheDtype::kFp8E4M3),
        kv_scales_(std::move(kv_scales)) {
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
  KvCacheScales kv_scales_;                     // FP8 KV: per layer, K's and V's (1.0: uncalibrated)
  std::vector<ZeroedPages> kv_;                 // per layer [num_blocks, 2, block, kv_heads, hd]
  // Forward's activations, kept across steps (Forward runs on one thread at a time).
  struct Activations {
    std::vector<float> x, xn, q, k, v, attn, proj, gate, up, sel, rope_cos, rope_sin;
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
  // Longest first (queries x keys, causal): the pool hands tasks out in order, so the short ones
  // fill in at the end instead of one long task running alone.
  auto cost = [&](const AttentionTask& t) {
    return static_cast<int64_t>(t.t1 - t.t0) * (batch.seqs[t.seq].start_pos + t.t1);
  };
  std::stable_sort(attention_tasks.begin(), attention_tasks.end(),
                   [&](const AttentionTask& a, const AttentionTask& b) { return cost(a) > cost(b); });
  auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
  // RoPE's cos and sin of every token's position, once for all layers and both q and k.
  const int half = hd / 2;
  float* rope_cos = Scratch(act_.rope_cos, static_cast<size_t>(T) * half);
  float* rope_sin = Scratch(act_.rope_sin, static_cast<size_t>(T) * half);
  cpu::RopeCosSin(positions.data(), T, hd, inv_freq_.data(), rope_cos, rope_sin);

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto kv_pool = [&](int layer) { return fp8_kv_ ? nullptr : static_cast<float*>(kv_[layer].data()); };
  auto kv_pool8 = [&](int layer) { return fp8_kv_ ? static_cast<uint8_t*>(kv_[layer].data()) : nullptr; };
  // q/k norms, RoPE and the KV cache write of tokens [t0, t1), on the calling thread.
  auto finish_qkv = [&](int layer, int t0, int t1) {
    const LayerWeights& w = weights_.layers[layer];
    const int n = t1 - t0;
    float* qb = q + static_cast<size_t>(t0) * q_dim;
    float* kb = k + static_cast<size_t>(t0) * kv_dim;
    const float* vb = v + static_cast<size_t>(t0) * kv_dim;
    if (c.qk_norm) {  // Qwen3: RMSNorm over each head's head_dim
      cpu::RmsNormRows(qb, w.q_norm.data(), n * nh, hd, eps, qb);
      cpu::RmsNormRows(kb, w.k_norm.data(), n * nkv, hd, eps, kb);
    }
    const float* cb = rope_cos + static_cast<size_t>(t0) * half;
    const float* sb = rope_sin + static_cast<size_t>(t0) * half;
    cpu::ApplyRopeCosSin(qb, n, nh, hd, cb, sb);
    cpu::ApplyRopeCosSin(kb, n, nkv, hd, cb, sb);
    if (fp8_kv_) {
      cpu::ReshapeAndCacheFp8(kb, vb, n, slots.data() + t0, block_size_, nkv, hd, kv_scales_.k(layer),
                              kv_scales_.v(layer), kv_pool8(layer));
    } else {
      cpu::ReshapeAndCache(kb, vb, n, slots.data() + t0, block_size_, nkv, hd, kv_pool(layer));
    }
  };
  // Queries [t0, t1) of slice `si` (indices within the slice) for KV heads [h0, h1), on the calling
  // thread; their K/V and those of every earlier token of the slice must be in the cache.
  auto attend = [&](int layer, int si, int t0, int t1, int h0, int h1) {
    const SequenceSlice& seq = batch.seqs[si];
    const size_t first = static_cast<size_t>(seq_offset[si] + t0) * q_dim;
    cpu::PagedAttentionArgs a;
    a.q = q + first;
    a.num_tokens = t1 - t0;
    a.start_pos = seq.start_pos + t0;
    a.kv_pool = kv_pool(layer);
    a.kv_pool_fp8 = kv_pool8(layer);
    a.k_scale = kv_scales_.k(layer);
    a.v_scale = kv_scales_.v(layer);
    a.block_table = seq.block_table.data();
    a.block_size = block_size_;
    a.num_heads = nh;
    a.num_kv_heads = nkv;
    a.head_dim = hd;
    a.scale = scale;
    a.out = attn + first;
    a.kv_head_begin = h0;
    a.kv_head_end = h1;
    cpu::PagedAttention(a);
  };
  auto attention = [&](int layer) {
    if (batch.on_layer_kv_written) batch.on_layer_kv_written(LayerKVReady{layer, [] { return true; }, {}});
    cpu::ParallelFor(static_cast<int>(attention_tasks.size()), [&](int i) {
      const AttentionTask& t = attention_tasks[i];
      attend(layer, t.seq, t.t0, t.t1, t.kv_head, t.kv_head + 1);
    });
  };

  const int token_block = TokenBlock(T, cpu::CpuPool()->num_threads());
  if (token_block > 0) {
    // Many tokens: every thread takes blocks of whole tokens through all of a layer's token-wise
    // work (norms, projections, RoPE, MLP) with the whole of each weight, so a layer is two loops on
    // the pool (this and attention) instead of one per operation, and a block's activations stay in
    // the thread's cache between operations. Each element's arithmetic is the one-operation-at-a-time
    // path's below (LinearOnThread and the *Rows kernels give their pool versions' values).
    const int num_blocks = (T + token_block - 1) / token_block;
    // Tokens [t0, t1) of layer `layer`: from the residual stream to q, k, v and the cache.
    auto qkv_block = [&](int layer, int t0, int t1) {
      const LayerWeights& w = weights_.layers[layer];
      const int n = t1 - t0;
      const float* xb = x + static_cast<size_t>(t0) * hidden;
      float* xnb = xn + static_cast<size_t>(t0) * hidden;
      cpu::RmsNormRows(xb, w.input_norm.data(), n, hidden, eps, xnb);
      cpu::LinearOnThread(xnb, n, w.q_proj.matrix(), bias(w.q_bias), q + static_cast<size_t>(t0) * q_dim);
      cpu::LinearOnThread(xnb, n, w.k_proj.matrix(), bias(w.k_bias), k + static_cast<size_t>(t0) * kv_dim);
      cpu::LinearOnThread(xnb, n, w.v_proj.matrix(), bias(w.v_bias), v + static_cast<size_t>(t0) * kv_dim);
      finish_qkv(layer, t0, t1);
    };
    // Tokens [t0, t1) of layer `layer` after attention: o_proj and the MLP, into the residual stream.
    auto mlp_block = [&](int layer, int t0, int t1) {
      const LayerWeights& w = weights_.layers[layer];
      const int n = t1 - t0;
      float* xb = x + static_cast<size_t>(t0) * hidden;
      float* xnb = xn + static_cast<size_t>(t0) * hidden;
      float* pb = proj + static_cast<size_t>(t0) * hidden;
      float* gb = gate + static_cast<size_t>(t0) * inter;
      float* ub = up + static_cast<size_t>(t0) * inter;
      const size_t size = static_cast<size_t>(n) * hidden;
      cpu::LinearOnThread(attn + static_cast<size_t>(t0) * q_dim, n, w.o_proj.matrix(), bias(w.o_bias), pb);
      for (size_t i = 0; i < size; ++i) xb[i] += pb[i];
      cpu::RmsNormRows(xb, w.post_norm.data(), n, hidden, eps, xnb);
      cpu::LinearOnThread(xnb, n, w.gate_proj.matrix(), nullptr, gb);
      cpu::LinearOnThread(xnb, n, w.up_proj.matrix(), nullptr, ub);
      cpu::SiluMulSerial(gb, ub, static_cast<long>(n) * inter, gb);
      cpu::LinearOnThread(gb, n, w.down_proj.matrix(), nullptr, pb);
      for (size_t i = 0; i < size; ++i) xb[i] += pb[i];
    };
    auto block_range = [&](int b) { return std::pair{b * token_block, std::min(T, (b + 1) * token_block)}; };
    if (!batch.on_layer_kv_written) {
      // One loop on the pool for the whole step: a task takes its block of tokens through every
      // layer. Attention of a block needs the K/V of the earlier blocks of its slices (causal), which
      // other threads write: the block's task publishes the layers whose KV it has written and waits
      // for those of the blocks it reads from before its attention. Tasks are handed out in order
      // and wait only on earlier ones, so the threads run as a wavefront, without a barrier between
      // operations (and inline, in order, when the pool is busy).
      std::vector<std::atomic<int>> kv_layers(static_cast<size_t>(num_blocks));
      for (auto& l : kv_layers) l.store(0, std::memory_order_relaxed);
      cpu::ParallelFor(num_blocks, [&](int b) {
        const auto [t0, t1] = block_range(b);
        // Slices with tokens in the block: from the one holding t0.
        const int s0 = static_cast<int>(std::upper_bound(seq_offset.begin(), seq_offset.end(), t0) -
                                        seq_offset.begin()) - 1;
        const int first_block = seq_offset[s0] / token_block;
        cpu::Embedding(ids.data() + t0, t1 - t0, weights_.embed.matrix(), x + static_cast<size_t>(t0) * hidden);
        for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
          qkv_block(layer, t0, t1);
          kv_layers[b].store(layer + 1, std::memory_order_release);
          for (int j = first_block; j < b; ++j) cpu::SpinUntilAtLeast(kv_layers[j], layer + 1);
          for (int si = s0; si < static_cast<int>(batch.seqs.size()) && seq_offset[si] < t1; ++si) {
            const int begin = std::max(t0, seq_offset[si]) - seq_offset[si];
            const int end = std::min(t1, seq_offset[si] + static_cast<int>(batch.seqs[si].token_ids.size())) -
                            seq_offset[si];
            if (begin < end) attend(layer, si, begin, end, 0, nkv);
          }
          mlp_block(layer, t0, t1);
        }
      });
    } else {
      // Layer-wise KV callbacks: each layer's KV of all blocks first, then the callback and attention.
      auto blocks = [&](auto&& fn) {
        cpu::ParallelFor(num_blocks, [&](int b) {
          const auto [t0, t1] = block_range(b);
          fn(t0, t1);
        });
      };
      blocks([&](int t0, int t1) {
        cpu::Embedding(ids.data() + t0, t1 - t0, weights_.embed.matrix(), x + static_cast<size_t>(t0) * hidden);
        qkv_block(0, t0, t1);
      });
      for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
        attention(layer);
        blocks([&](int t0, int t1) {
          mlp_block(layer, t0, t1);
          if (layer + 1 < c.num_hidden_layers) qkv_block(layer + 1, t0, t1);
        });
      }
    }
  } else {
    cpu::Embedding(ids.data(), T, weights_.embed.matrix(), x);
    for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
      const LayerWeights& w = weights_.layers[layer];
      cpu::RmsNorm(x, w.input_norm.data(), T, hidden, eps, xn);
      cpu::Linear(xn, T, w.q_proj.matrix(), bias(w.q_bias), q);
      cpu::Linear(xn, T, w.k_proj.matrix(), bias(w.k_bias), k);
      cpu::Linear(xn, T, w.v_proj.matrix(), bias(w.v_bias), v);
      finish_qkv(layer, 0, T);
      attention(layer);
      cpu::Linear(attn, T, w.o_proj.matrix(), bias(w.o_bias), proj);
      for (size_t i = 0; i < x_size; ++i) x[i] += proj[i];
      cpu::RmsNorm(x, w.post_norm.data(), T, hidden, eps, xn);
      cpu::Linear(xn, T, w.gate_proj.matrix(), nullptr, gate);
      cpu::Linear(xn, T, w.up_proj.matrix(), nullptr, up);
      cpu::SiluMul(gate, up, static_cast<long>(T) * inter, gate);
      cpu::Linear(gate, T, w.down_proj.matrix(), nullptr, proj);
      for (size_t i = 0; i < x_size; ++i) x[i] += proj[i];
    }
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
  KvCacheScales kv_scales = UnitKvCacheScales(config);
  if (kv_dtype == KvCacheDtype::kFp8E4M3) {
    TANDEM_ASSIGN_OR_RETURN(kv_scales, LoadKvCacheScales(*weights.source, config));
    log::info("KV cache: FP8 E4M3 ({}), a quarter of the fp32 pool's bytes",
              kv_scales.calibrated ? "the checkpoint's k_scale / v_scale" : "scale 1.0 per layer and KV head");
  }
  return std::unique_ptr<ModelRunner>(
      std::make_unique<CpuModelRunner>(std::move(config), std::move(weights), kv_dtype, std::move(kv_scales)));
}

}  // namespace tandem
