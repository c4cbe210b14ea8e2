// The CUDA runner's forward pass (RunModel: cuda_runner_impl.h), enqueued on the runner's stream:
// embedding, then per layer fused-add RMSNorm, one cuBLAS GEMM per projection for all of the
// step's tokens (qkv, o, gate_up, down), q/k norm + RoPE with the K/V write into the paged pool,
// attention over the pool (PagedDecode when every slice has one token, else PagedPrefill), SiLU*mul;
// then the final norm, the logit rows and, for picks, argmax / log-sum-exp on the GPU. Layer-wise
// KV readiness for the prefill worker's transfer (ReportLayerKV) is reported after each layer's
// K/V write. The step around it (inputs, graphs, sampling): cuda_runner_step.cc.
#ifdef TANDEM_HAVE_CUDA

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/kv_dequant.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/qk_norm_rope.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/silu_mul.h"
#include "model/cuda_runner_impl.h"
#include "model/cuda_runner_step.h"

namespace tandem {
namespace {

using bf16 = __nv_bfloat16;
using cuda_step::Align16;
using cuda_step::MetaLayout;

// y[rows, n] = in[rows, k] W^T (+ bias) with contiguous rows, as every projection of a step runs.
cuda::LinearArgs ProjectionArgs(const bf16* in, int k, const DeviceArray& w, const bf16* bias, void* out,
                                int n, cuda::OutDtype dtype, int rows) {
  cuda::LinearArgs a;
  a.x = in;
  a.ldx = k;
  a.w = w.as<bf16>();
  a.bias = bias;
  a.y = out;
  a.ldy = n;
  a.out_dtype = dtype;
  a.m = rows;
  a.n = n;
  a.k = k;
  return a;
}

}  // namespace

Status CudaModelRunner::RunModel(const StepPlan& p, const char* meta) {
  const ModelConfig& c = config_;
  const int hidden = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int hd = c.head_dim, inter = c.intermediate_size, vocab = c.vocab_size;
  const int q_dim = nh * hd, qkv_dim = (nh + 2 * nkv) * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int T = p.T;
  const MetaLayout lay(p.T, p.num_seqs, p.stride, p.gather ? p.rows : 0, p.fp8_src_total);
  const auto* d_slots = reinterpret_cast<const int64_t*>(meta + lay.slots);
  const auto* d_ids = reinterpret_cast<const int32_t*>(meta + lay.ids);
  const auto* d_pos = reinterpret_cast<const int32_t*>(meta + lay.pos);
  const auto* d_qsl = reinterpret_cast<const int32_t*>(meta + lay.qsl);
  const auto* d_start = reinterpret_cast<const int32_t*>(meta + lay.start);
  const auto* d_ctx = reinterpret_cast<const int32_t*>(meta + lay.ctx);
  const auto* d_tables = reinterpret_cast<const int32_t*>(meta + lay.tables);
  const auto* d_rows = reinterpret_cast<const int32_t*>(meta + lay.rows);
  const auto* d_fp8_tables = reinterpret_cast<const int32_t*>(meta + lay.fp8_tables);
  const auto* d_fp8_src = reinterpret_cast<const int32_t*>(meta + lay.fp8_src);
  // FP8 KV: layer l's K scales [nkv], then its V scales (kv_scales_: [layers, 2, nkv]).
  auto k_scales_of = [&](int l) -> const float* {
    return fp8_kv_ ? kv_scales_.as<float>() + static_cast<size_t>(l) * 2 * c.num_key_value_heads : nullptr;
  };
  auto v_scales_of = [&](int l) -> const float* { return fp8_kv_ ? k_scales_of(l) + c.num_key_value_heads : nullptr; };
  bf16* x = residual_.as<bf16>();       // [T, hidden] residual stream
  bf16* h = hidden_.as<bf16>();         // [T, hidden] normed input / projection output
  bf16* qkv = qkv_.as<bf16>();          // [T, qkv_dim]: q [nh, hd], k [nkv, hd], v [nkv, hd]
  bf16* attn = attn_.as<bf16>();        // [T, nh, hd]
  bf16* gate_up = gate_up_.as<bf16>();  // [T, 2 * inter]
  bf16* act = act_.as<bf16>();          // [T, inter]

  auto linear = [&](const bf16* in, int k, const DeviceArray& w, const DeviceArray& bias, void* out,
                    int n, cuda::OutDtype dtype, int rows) {
    cuda::LinearArgs a =
        ProjectionArgs(in, k, w, bias.bytes() > 0 ? bias.as<bf16>() : nullptr, out, n, dtype, rows);
    // Small m (the GEMV) on sm_90+: its weights stream in while the kernel before it (a norm,
    // attention, silu_mul: each calls TriggerDependents first) finishes.
    a.programmatic_launch = true;
    return cuda::Linear(cublas_, a, stream_);
  };
  // A layer's projection: FP8 codes and scales (w_.fp8; fp8_linear.h) or bf16.
  auto proj = [&](const bf16* in, int k, const DeviceArray& w, const DeviceArray& scale, bool block128,
                  const DeviceArray& bias, bf16* out, int n, bool prequantized = false) -> Status {
    if (!w_.fp8) return linear(in, k, w, bias, out, n, cuda::OutDtype::kBf16, T);
    cuda::Fp8LinearArgs a;
    a.x = in;
    a.ldx = k;
    a.w.q = w.as<uint8_t>();
    a.w.scale = scale.as<float>();
    a.w.scaling = block128 ? cuda::Fp8Scaling::kBlock128 : cuda::Fp8Scaling::kPerChannel;
    a.bias = bias.bytes() > 0 ? bias.as<bf16>() : nullptr;
    a.y = out;
    a.ldy = n;
    a.m = T;
    a.n = n;
    a.k = k;
    a.programmatic_launch = true;
    a.x_prequantized = prequantized;
    return cuda::Fp8Linear(fp8_gemm_.get(), a, fp8_scratch_.as<void>(), fp8_scratch_.bytes(), stream_);
  };
  // The norm in front of a projection on the FP8 GEMM path writes its activation codes instead of
  // out (then proj(..., prequantized = true)); with block weights only for whole groups of
  // kFp8GemmRowMultiple rows (Fp8Linear sends no row of them to the GEMV, which reads bf16).
  auto quantizing_norm = [&](bool block128) {
    return fused_norm_quant_ && w_.fp8 && fp8_gemm_ != nullptr && T > cuda::GemvMaxM() &&
           (!block128 || T % cuda::kFp8GemmRowMultiple == 0) && hidden % 8 == 0 &&
           hidden <= cuda::kRmsNormQuantizeMaxDim;
  };
  auto norm = [&](const bf16* in, const DeviceArray& w, bf16* out, bool fused, bool quantize = false,
                  bool block128 = false) {
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
    if (quantize) return cuda::RmsNormQuantizeFp8(a, fused, block128, fp8_scratch_.as<void>(), fp8_scratch_.bytes(), stream_);
    return fused ? cuda::FusedAddRmsNorm(a, stream_) : cuda::RmsNorm(a, stream_);
  };
  // What PagedDecodeArgs and PagedPrefillArgs share (same field names): q in the fused qkv rows,
  // the output rows, the block tables, the shapes; the pool is set by each (FP8 KV: decode reads
  // the codes, prefill the scratch pool).
  auto attention_args = [&](auto& a) {
    a.q = qkv;
    a.q_stride = qkv_dim;
    a.out = attn;
    a.out_stride = q_dim;
    a.block_tables = d_tables;
    a.block_table_stride = p.stride;
    a.num_seqs = p.num_seqs;
    a.block_size = block_size_;
    a.num_heads = nh;
    a.num_kv_heads = nkv;
    a.head_dim = hd;
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  };
  // Layer l's pool into a QkNormRopeCacheArgs or PagedDecodeArgs (same field names): the FP8 codes
  // and scales with --kv-cache-dtype fp8, else the bf16 pool.
  auto set_pool = [&](auto& a, int l) {
    if (fp8_kv_) {
      a.kv_pool_fp8 = kv_[l].as<uint8_t>();
      a.k_scales = k_scales_of(l);
      a.v_scales = v_scales_of(l);
    } else {
      a.kv_pool = kv_[l].as<bf16>();
    }
  };
  const DeviceArray kNone;

  // mark(g): closes kernel group g for StepTimeline::device_groups (nothing otherwise).
  auto mark = [this](const char* group) { return MarkGroup(group); };
  TANDEM_RETURN_IF_ERROR(mark("start"));
  TANDEM_RETURN_IF_ERROR(cuda::Embedding(d_ids, T, w_.embed.as<bf16>(), vocab, hidden, x, stream_));
  TANDEM_RETURN_IF_ERROR(mark("embedding"));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const DeviceLayer& w = w_.layers[l];
    if (onboard_layers_pending_) {  // layer-wise onboarding: this layer's blocks are in (cuda_runner_onboard.cc)
      TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, onboard_layer_events_[l], 0));
    }
    // h holds the previous layer's MLP output: residual += h; h = norm(residual).
    const bool qkv_codes = quantizing_norm(w.qkv_block128);
    TANDEM_RETURN_IF_ERROR(l == 0 ? norm(x, w.input_norm, h, false, qkv_codes, w.qkv_block128)
                                  : norm(h, w.input_norm, h, true, qkv_codes, w.qkv_block128));
    TANDEM_RETURN_IF_ERROR(mark("norm"));
    TANDEM_RETURN_IF_ERROR(
        proj(h, hidden, w.qkv, w.qkv_scale, w.qkv_block128, w.qkv_bias, qkv, qkv_dim, qkv_codes));
    TANDEM_RETURN_IF_ERROR(mark("qkv"));
    // q/k norm + RoPE, this step's K/V into the pool: one kernel (qk_norm_rope.h).
    cuda::QkNormRopeCacheArgs r;
    r.rope.q = qkv;
    r.rope.q_stride = qkv_dim;
    r.rope.k = qkv + q_dim;
    r.rope.k_stride = qkv_dim;
    r.rope.q_norm = w.q_norm.bytes() > 0 ? w.q_norm.as<bf16>() : nullptr;
    r.rope.k_norm = w.k_norm.bytes() > 0 ? w.k_norm.as<bf16>() : nullptr;
    r.rope.positions = d_pos;
    r.rope.inv_freq = w_.inv_freq.as<float>();
    r.rope.num_tokens = T;
    r.rope.num_heads = nh;
    r.rope.num_kv_heads = nkv;
    r.rope.head_dim = hd;
    r.rope.eps = eps;
    r.v = qkv + q_dim + nkv * hd;
    r.v_stride = qkv_dim;
    r.slot_mapping = d_slots;
    set_pool(r, l);
    r.block_size = block_size_;
    TANDEM_RETURN_IF_ERROR(cuda::QkNormRopeCache(r, stream_));
    TANDEM_RETURN_IF_ERROR(mark("qk_norm_rope_cache"));
    if (layer_hook_ != nullptr) TANDEM_RETURN_IF_ERROR(ReportLayerKV(l));
    // Decode rows (every slice of a decode step; the leading one-token slices of a mixed step:
    // token row = sequence) through PagedDecode, the other slices through PagedPrefill.
    const int decode_seqs = p.decode_seqs();
    if (decode_seqs > 0) {
      cuda::PagedDecodeArgs a;
      attention_args(a);
      set_pool(a, l);
      a.num_seqs = decode_seqs;
      a.context_lens = d_ctx;
      a.max_context_len = p.max_context_len;
      a.num_splits = p.decode ? p.num_splits : 0;
      a.workspace = workspace_.as<void>();
      a.workspace_bytes = workspace_.bytes();
      a.workspace_initialized = true;  // PagedDecodeInitWorkspace ran when it was allocated
      TANDEM_RETURN_IF_ERROR(cuda::PagedDecode(a, stream_));
    }
    if (!p.decode && decode_seqs < p.num_seqs) {
      cuda::PagedPrefillArgs a;
      attention_args(a);
      // The remaining slices: their per-sequence arrays from `decode_seqs` on (query_start_loc
      // holds absolute token rows, so q and out stay the step's).
      a.num_seqs = p.num_seqs - decode_seqs;
      a.block_tables = d_tables + static_cast<size_t>(decode_seqs) * p.stride;
      a.query_start_loc = d_qsl + decode_seqs;
      a.start_pos = d_start + decode_seqs;
      a.max_query_len = p.max_query_len;
      if (!fp8_kv_) {
        a.kv_pool = kv_[l].as<bf16>();
        TANDEM_RETURN_IF_ERROR(cuda::PagedPrefill(a, stream_));
      }
      // FP8 KV: each group's blocks to bf16 in the scratch pool, then its slices over that pool.
      for (const StepPlan::Fp8Group& g : p.fp8_groups) {
        cuda::DequantizeKvBlocksArgs dq;
        dq.src_pool = kv_[l].as<uint8_t>();
        dq.src_blocks = d_fp8_src + g.src_begin;
        dq.num_blocks = g.blocks;
        dq.dst_pool = kv_scratch_.as<bf16>();
        dq.k_scales = k_scales_of(l);
        dq.v_scales = v_scales_of(l);
        dq.block_size = block_size_;
        dq.num_kv_heads = nkv;
        dq.head_dim = hd;
        TANDEM_RETURN_IF_ERROR(cuda::DequantizeKvBlocks(dq, stream_));
        a.kv_pool = kv_scratch_.as<bf16>();
        a.num_seqs = g.seq_end - g.seq_begin;
        a.block_tables = d_fp8_tables + static_cast<size_t>(g.seq_begin) * p.stride;
        a.query_start_loc = d_qsl + g.seq_begin;
        a.start_pos = d_start + g.seq_begin;
        a.max_query_len = g.max_query_len;
        TANDEM_RETURN_IF_ERROR(cuda::PagedPrefill(a, stream_));
      }
    }
    TANDEM_RETURN_IF_ERROR(mark("attention"));
    TANDEM_RETURN_IF_ERROR(proj(attn, q_dim, w.o, w.o_scale, w.o_block128, w.o_bias, h, hidden));
    TANDEM_RETURN_IF_ERROR(mark("o_proj"));
    const bool gate_up_codes = quantizing_norm(w.gate_up_block128);
    // residual += attn out
    TANDEM_RETURN_IF_ERROR(norm(h, w.post_norm, h, true, gate_up_codes, w.gate_up_block128));
    TANDEM_RETURN_IF_ERROR(mark("norm"));
    TANDEM_RETURN_IF_ERROR(proj(h, hidden, w.gate_up, w.gate_up_scale, w.gate_up_block128, kNone, gate_up,
                                2 * inter, gate_up_codes));
    TANDEM_RETURN_IF_ERROR(mark("gate_up"));
    cuda::SiluMulArgs sm;
    sm.gate = gate_up;
    sm.gate_stride = 2 * inter;
    sm.up = gate_up + inter;
    sm.up_stride = 2 * inter;
    sm.out = act;
    sm.out_stride = inter;
    sm.num_tokens = T;
    sm.dim = inter;
    // FP8 weights on the GEMM path from fused_silu_quant_min_tokens_ on: SwiGLU straight into the
    // down projection's activation codes (the bf16 activation is never written). On the H200
    // (Qwen3-8B shapes, dev/kernels/results/2026-12-04c-*, the row in registers) silu_mul + down
    // take 8.0 against 8.4 ms at a 2k prefill, 1.83 against 1.88 ms a step at 256 tokens and 1.53
    // against 1.63 at 64; the GEMV (small m) reads bf16 anyway.
    const bool fused = w_.fp8 && fp8_gemm_ != nullptr && T > cuda::GemvMaxM() && T >= fused_silu_quant_min_tokens_ &&
                       (!w.down_block128 || T % cuda::kFp8GemmRowMultiple == 0);
    if (fused) {
      TANDEM_RETURN_IF_ERROR(
          cuda::SiluMulQuantizeFp8(sm, w.down_block128, fp8_scratch_.as<void>(), fp8_scratch_.bytes(), stream_));
    } else {
      TANDEM_RETURN_IF_ERROR(cuda::SiluMul(sm, stream_));
    }
    TANDEM_RETURN_IF_ERROR(mark("silu_mul"));
    TANDEM_RETURN_IF_ERROR(proj(act, inter, w.down, w.down_scale, w.down_block128, kNone, h, hidden, fused));
    TANDEM_RETURN_IF_ERROR(mark("down"));
  }
  if (p.rows == 0) return Status::Ok();
  // residual += last MLP out; final norm; the logit rows gathered (Embedding as a row gather).
  TANDEM_RETURN_IF_ERROR(norm(h, w_.final_norm, h, true));
  const bf16* head_in = h;
  if (p.gather) {
    TANDEM_RETURN_IF_ERROR(cuda::Embedding(d_rows, p.rows, h, T, hidden, sel_.as<bf16>(), stream_));
    head_in = sel_.as<bf16>();
  }
  TANDEM_RETURN_IF_ERROR(linear(head_in, hidden, w_.lm_head_or_embed(), kNone, logits_.as<float>(),
                                vocab, cuda::OutDtype::kFloat32, p.rows));
  TANDEM_RETURN_IF_ERROR(mark("lm_head"));
  if (p.sample_rows > 0) {
    // TANDEM_ARGMAX_SPLIT=0: one block per row (the kernel before the split, for comparisons).
    static const bool split_lse = [] {
      const char* v = std::getenv("TANDEM_ARGMAX_SPLIT");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    char* base = picks_.as<char>();
    const size_t col = Align16(sizeof(float) * p.picks_cap);
    TANDEM_RETURN_IF_ERROR(cuda::ArgmaxLogSumExp(
        logits_.as<float>() + static_cast<size_t>(p.sample_begin) * vocab, vocab, p.sample_rows,
        vocab, reinterpret_cast<int32_t*>(base), reinterpret_cast<float*>(base + col),
        reinterpret_cast<float*>(base + 2 * col), stream_, split_lse ? lse_ws_.as<void>() : nullptr,
        lse_ws_.bytes()));
    TANDEM_RETURN_IF_ERROR(mark("sampling"));
  }
  return Status::Ok();
}

Status CudaModelRunner::TuneProjections(const StepPlan& p) {
  const ModelConfig& c = config_;
  const int hidden = c.hidden_size, inter = c.intermediate_size;
  const int q_dim = c.num_attention_heads * c.head_dim;
  const int qkv_dim = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim;
  // `member`: a per-layer projection, timed over every layer's matrix so that W comes from HBM;
  // null: `weight` alone (lm_head). Called every padded step: once a shape is tuned, a lookup.
  auto tune = [&](const void* in, int k, const DeviceArray DeviceLayer::*member, const DeviceArray& weight,
                  void* out, int n, cuda::OutDtype dtype, int rows) {
    if (rows <= cuda::GemvMaxM()) return Status::Ok();
    const cuda::LinearArgs a =
        ProjectionArgs(static_cast<const bf16*>(in), k, weight, nullptr, out, n, dtype, rows);
    if (tuner_->Tuned(a)) return Status::Ok();
    std::vector<const bf16*> weights;
    if (member != nullptr)
      for (const DeviceLayer& l : w_.layers) weights.push_back((l.*member).as<bf16>());
    return tuner_->Tune(cublas_, a, stream_, weights);
  };
  // The same buffers RunModel gives each projection (their contents do not matter: the step
  // recomputes all of them from the embedding on).
  const DeviceLayer& w = w_.layers[0];
  if (w_.fp8) {  // the FP8 projections run fp8_linear.h (cuBLASLt's heuristic), not the tuner
    if (p.rows > 0) {
      const bf16* head_in = p.gather ? sel_.as<bf16>() : hidden_.as<bf16>();
      TANDEM_RETURN_IF_ERROR(tune(head_in, hidden, nullptr, w_.lm_head_or_embed(), logits_.as<float>(),
                                  c.vocab_size, cuda::OutDtype::kFloat32, p.rows));
    }
    return Status::Ok();
  }
  TANDEM_RETURN_IF_ERROR(tune(hidden_.as<bf16>(), hidden, &DeviceLayer::qkv, w.qkv, qkv_.as<bf16>(), qkv_dim,
                              cuda::OutDtype::kBf16, p.T));
  TANDEM_RETURN_IF_ERROR(tune(attn_.as<bf16>(), q_dim, &DeviceLayer::o, w.o, hidden_.as<bf16>(), hidden,
                              cuda::OutDtype::kBf16, p.T));
  TANDEM_RETURN_IF_ERROR(tune(hidden_.as<bf16>(), hidden, &DeviceLayer::gate_up, w.gate_up,
                              gate_up_.as<bf16>(), 2 * inter, cuda::OutDtype::kBf16, p.T));
  TANDEM_RETURN_IF_ERROR(tune(act_.as<bf16>(), inter, &DeviceLayer::down, w.down, hidden_.as<bf16>(), hidden,
                              cuda::OutDtype::kBf16, p.T));
  if (p.rows > 0) {
    const bf16* head_in = p.gather ? sel_.as<bf16>() : hidden_.as<bf16>();
    TANDEM_RETURN_IF_ERROR(tune(head_in, hidden, nullptr, w_.lm_head_or_embed(), logits_.as<float>(),
                                c.vocab_size, cuda::OutDtype::kFloat32, p.rows));
  }
  return Status::Ok();
}

Status CudaModelRunner::ReportLayerKV(int layer) {
  if (layer_events_.size() != static_cast<size_t>(config_.num_hidden_layers)) {
    layer_events_.assign(config_.num_hidden_layers, nullptr);
  }
  cudaEvent_t& ev = layer_events_[layer];
  if (ev == nullptr) TANDEM_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  TANDEM_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev, stream_));
  const cudaEvent_t event = ev;
  const int device = device_id_;
  // Queried from the transfer thread: make this runner's device current there first (a query
  // from a thread on another device would create a context on it). An error other than "not
  // ready" also ends the wait; the transfer then reads what is there and the step reports it.
  (*layer_hook_)(LayerKVReady{layer, [event, device] {
                                cudaSetDevice(device);
                                return cudaEventQuery(event) != cudaErrorNotReady;
                              }, {}});
  return Status::Ok();
}
}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
