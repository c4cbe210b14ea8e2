// The CUDA runner's step (cuda_runner_impl.h). All new tokens of all slices go through each
// projection as one cuBLAS GEMM, the residual stream stays on the GPU in bf16 (vLLM's
// fused_add_rms_norm layout), attention runs once per layer for the whole batch (PagedDecode when
// every slice has one token, else PagedPrefill). Host side: the step's inputs go up in one copy from
// pinned memory, kPick picks (argmax, log-sum-exp, top-k; sampled ones with penalties, temperature,
// min-p, top-k, top-p: sampling_filter.h) are computed on the GPU and only ids and a few floats
// come back; decode steps are padded to a batch bucket and replayed from CUDA
// graphs (cuda_decode_graphs.h). The forward pass itself (RunModel): cuda_runner_layers.cc.
#ifdef TANDEM_HAVE_CUDA

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/sampling_filter.h"
#include "kernels/cuda/token_bitmask.h"
#include "model/cuda_decode_graphs.h"
#include "model/cuda_runner_impl.h"
#include "model/cuda_runner_step.h"

namespace tandem {
namespace {

using bf16 = __nv_bfloat16;
using cuda_step::Align16;
using cuda_step::MetaLayout;
using cuda_step::PicksBytes;

}  // namespace

namespace {
using Logits = SequenceSlice::Logits;
}  // namespace

Status CudaModelRunner::ReserveTracked(DeviceArray& a, size_t bytes) {
  if (bytes <= a.bytes()) return Status::Ok();
  ++graph_generation_;
  return a.Allocate(bytes);
}

Status CudaModelRunner::InitOnce() {
  if (initialized_) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(cublas_workspace_.Allocate(kCublasWorkspaceBytes));
  TANDEM_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_.get(), stream_));
  TANDEM_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(cublas_.get(), cublas_workspace_.as<void>(), kCublasWorkspaceBytes));
  const char* tune = std::getenv("TANDEM_GEMM_TUNE");
  if (tune == nullptr || std::strcmp(tune, "0") != 0) {
    auto tuner = cuda::GemmTuner::Create(cublas_workspace_.as<void>(), kCublasWorkspaceBytes);
    if (tuner.ok()) {
      tuner_ = std::move(*tuner);
      cublas_.set_tuner(tuner_.get());
    } else if (tuner.status().code() != StatusCode::kUnimplemented) {
      return tuner.status();
    }
  }
  if (w_.fp8) {
    TANDEM_ASSIGN_OR_RETURN(fp8_gemm_, cuda::Fp8Gemm::Create(cublas_workspace_.as<void>(), kCublasWorkspaceBytes));
    if (const char* fused = std::getenv("TANDEM_FUSED_SILU_QUANT"); fused != nullptr) {
      fused_silu_quant_min_tokens_ = std::atoi(fused) > 0 ? std::atoi(fused) : std::numeric_limits<int>::max();
    }
    if (const char* fused = std::getenv("TANDEM_FUSED_NORM_QUANT"); fused != nullptr) {
      fused_norm_quant_ = std::strcmp(fused, "0") != 0;
    }
  }
  initialized_ = true;
  return Status::Ok();
}

Status CudaModelRunner::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  ForwardOutput out;
  TANDEM_RETURN_IF_ERROR(Step(batch, false, &out));
  *logits = std::move(out.logits);
  return Status::Ok();
}

Status CudaModelRunner::Execute(const ForwardBatch& batch, ForwardOutput* out) {
  return Step(batch, true, out);
}

Status CudaModelRunner::Step(const ForwardBatch& batch, bool picks, ForwardOutput* out) {
  out->logits.clear();
  out->samples.clear();
  PhaseClock clock(timeline_);  // host phases (step_timeline.h)
  TANDEM_RETURN_IF_ERROR(Validate(batch));
  const ModelConfig& c = config_;
  const int vocab = c.vocab_size;
  const int n_real = static_cast<int>(batch.seqs.size());
  if (n_real == 0) return Status::Ok();
  auto kind = [picks](const SequenceSlice& s) {
    return !picks && s.logits == Logits::kArgmax ? Logits::kNone : s.logits;
  };
  for (const SequenceSlice& s : batch.seqs) {
    if (kind(s) == Logits::kArgmax && s.num_logprobs > vocab) {
      return Err(StatusCode::kInvalidArgument, "num_logprobs {} exceeds the vocabulary of {}",
                 s.num_logprobs, vocab);
    }
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_id_));
  TANDEM_RETURN_IF_ERROR(InitOnce());

  // ---- plan ----
  StepPlan p;
  int total = 0, blocks_max = 1, num_arg = 0;
  for (const SequenceSlice& s : batch.seqs) {
    const int n = static_cast<int>(s.token_ids.size());
    total += n;
    p.decode = p.decode && n == 1;
    p.decode_prefix += p.decode;  // still true: every slice so far had one token
    blocks_max = std::max(blocks_max, (s.start_pos + n + block_size_ - 1) / block_size_);
    p.max_query_len = std::max(p.max_query_len, n);
    p.max_context_len = std::max(p.max_context_len, s.start_pos + n);
    num_arg += kind(s) == Logits::kArgmax;
  }
  const int model_blocks = (c.max_position_embeddings + block_size_ - 1) / block_size_;
  const int bucket = p.decode && graphs_.padded() ? DecodeBatchBucket(n_real) : 0;
  const int stride_bucket = bucket > 0 ? DecodeStrideBucket(blocks_max, model_blocks) : 0;
  p.padded = bucket > 0 && stride_bucket > 0;
  p.T = p.padded ? bucket : total;
  p.num_seqs = p.padded ? bucket : n_real;
  p.stride = p.padded ? stride_bucket : blocks_max;
  if (p.padded) {
    cuda::PagedDecodeArgs probe;  // the graph's splits: a function of the key only
    probe.num_seqs = bucket;
    probe.num_heads = c.num_attention_heads;
    probe.num_kv_heads = c.num_key_value_heads;
    probe.head_dim = c.head_dim;  // which decode kernel, hence its split choice
    probe.max_context_len = stride_bucket * block_size_;
    if (fp8_kv_) probe.kv_pool_fp8 = kv_[0].as<uint8_t>();
    p.num_splits = cuda::PagedDecodeSplits(probe);
  }
  // Logits rows: padded decode computes every token row (row = sequence); otherwise the returned
  // rows first, then the picked ones, gathered.
  std::vector<int32_t> ret_rows, arg_tok_rows;
  {
    int t = 0;
    for (const SequenceSlice& s : batch.seqs) {
      const int n = static_cast<int>(s.token_ids.size());
      const Logits k = kind(s);
      if (k == Logits::kAll) for (int i = 0; i < n; ++i) ret_rows.push_back(t + i);
      if (k == Logits::kLast) ret_rows.push_back(t + n - 1);
      if (k == Logits::kArgmax) {
        arg_tok_rows.push_back(t + n - 1);
        p.arg_k.push_back(s.num_logprobs);
        p.arg_pick.push_back(s.pick);
      }
      t += n;
    }
  }
  std::vector<int32_t> logit_rows;
  if (p.padded) {
    p.rows = (ret_rows.empty() && arg_tok_rows.empty()) ? 0 : bucket;
    for (int32_t r : ret_rows) {
      if (!p.out_runs.empty() && p.out_runs.back().first + p.out_runs.back().second == r) {
        ++p.out_runs.back().second;
      } else {
        p.out_runs.emplace_back(r, 1);
      }
    }
    p.arg_rows.assign(arg_tok_rows.begin(), arg_tok_rows.end());
    p.sample_rows = num_arg > 0 ? bucket : 0;
  } else {
    logit_rows = ret_rows;
    logit_rows.insert(logit_rows.end(), arg_tok_rows.begin(), arg_tok_rows.end());
    p.rows = static_cast<int>(logit_rows.size());
    p.gather = true;
    if (!ret_rows.empty()) p.out_runs.emplace_back(0, static_cast<int>(ret_rows.size()));
    for (int i = 0; i < num_arg; ++i) p.arg_rows.push_back(static_cast<int>(ret_rows.size()) + i);
    p.sample_begin = static_cast<int>(ret_rows.size());
    p.sample_rows = num_arg;
  }
  p.picks_cap = std::max(kMaxDecodeGraphBatch, p.sample_rows);
  if (fp8_kv_ && !p.decode) {
    // The prefill slices' blocks, grouped so that a group's bf16 copy fits the scratch budget.
    const int budget = static_cast<int>(std::max<size_t>(kFp8PrefillScratchBytes / ScratchBlockBytes(), 1));
    for (int s = p.decode_prefix; s < n_real; ++s) {
      const SequenceSlice& seq = batch.seqs[s];
      const int n = static_cast<int>(seq.token_ids.size());
      const int blocks = (seq.start_pos + n + block_size_ - 1) / block_size_;
      if (p.fp8_groups.empty() || p.fp8_groups.back().blocks + blocks > budget) {
        StepPlan::Fp8Group g;
        g.seq_begin = s;
        g.src_begin = p.fp8_src_total;
        p.fp8_groups.push_back(g);
      }
      StepPlan::Fp8Group& g = p.fp8_groups.back();
      g.seq_end = s + 1;
      g.blocks += blocks;
      g.max_query_len = std::max(g.max_query_len, n);
      p.fp8_src_total += blocks;
      p.fp8_max_blocks = std::max(p.fp8_max_blocks, g.blocks);
    }
  }

  // ---- inputs: one pinned staging buffer, one upload ----
  const MetaLayout lay(p.T, p.num_seqs, p.stride, p.gather ? p.rows : 0, p.fp8_src_total);
  TANDEM_RETURN_IF_ERROR(host_meta_.Reserve(lay.total));
  char* hm = host_meta_.as<char>();
  auto* slots = reinterpret_cast<int64_t*>(hm + lay.slots);
  auto* ids = reinterpret_cast<int32_t*>(hm + lay.ids);
  auto* pos = reinterpret_cast<int32_t*>(hm + lay.pos);
  auto* qsl = reinterpret_cast<int32_t*>(hm + lay.qsl);
  auto* start = reinterpret_cast<int32_t*>(hm + lay.start);
  auto* ctx = reinterpret_cast<int32_t*>(hm + lay.ctx);
  auto* tables = reinterpret_cast<int32_t*>(hm + lay.tables);
  std::memset(tables, 0, sizeof(int32_t) * p.num_seqs * static_cast<size_t>(p.stride));
  {
    int t = 0;
    qsl[0] = 0;
    for (int s = 0; s < n_real; ++s) {
      const SequenceSlice& seq = batch.seqs[s];
      const int n = static_cast<int>(seq.token_ids.size());
      const int blocks = (seq.start_pos + n + block_size_ - 1) / block_size_;
      std::copy_n(seq.block_table.begin(), blocks, tables + static_cast<size_t>(s) * p.stride);
      for (int i = 0; i < n; ++i, ++t) {
        const int at = seq.start_pos + i;
        ids[t] = seq.token_ids[i];
        pos[t] = at;
        slots[t] = static_cast<int64_t>(seq.block_table[at / block_size_]) * block_size_ +
                   at % block_size_;
      }
      qsl[s + 1] = t;
      start[s] = seq.start_pos;
      ctx[s] = seq.start_pos + n;
    }
    // Padding rows: token 0 at position 0, no KV write (slot -1), attending to one key of block 0.
    for (int s = n_real; s < p.num_seqs; ++s, ++t) {
      ids[t] = 0;
      pos[t] = 0;
      slots[t] = -1;
      qsl[s + 1] = t + 1;
      start[s] = 0;
      ctx[s] = 1;
    }
  }
  if (p.gather) {
    std::copy(logit_rows.begin(), logit_rows.end(), reinterpret_cast<int32_t*>(hm + lay.rows));
  }
  if (p.fp8_src_total > 0) {  // renumbered tables and the source blocks, group by group
    auto* fp8_tables = reinterpret_cast<int32_t*>(hm + lay.fp8_tables);
    auto* fp8_src = reinterpret_cast<int32_t*>(hm + lay.fp8_src);
    std::memset(fp8_tables, 0, sizeof(int32_t) * p.num_seqs * static_cast<size_t>(p.stride));
    for (const StepPlan::Fp8Group& g : p.fp8_groups) {
      int next = 0;
      for (int s = g.seq_begin; s < g.seq_end; ++s) {
        const int blocks = (ctx[s] + block_size_ - 1) / block_size_;
        for (int b = 0; b < blocks; ++b, ++next) {
          fp8_tables[static_cast<size_t>(s) * p.stride + b] = next;
          fp8_src[g.src_begin + next] = tables[static_cast<size_t>(s) * p.stride + b];
        }
      }
    }
    TANDEM_RETURN_IF_ERROR(
        kv_scratch_.Reserve(static_cast<size_t>(p.fp8_max_blocks) * ScratchBlockBytes()));
  }
  DeviceArray& dmeta = p.padded ? graph_meta_ : meta_;
  if (p.padded) {  // sized once for the largest graph, so graphs never see it move
    TANDEM_RETURN_IF_ERROR(ReserveTracked(
        graph_meta_, MetaLayout(kMaxDecodeGraphBatch, kMaxDecodeGraphBatch, model_blocks, 0).total));
  } else {
    TANDEM_RETURN_IF_ERROR(meta_.Reserve(lay.total));
  }
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dmeta.as<char>(), hm, lay.total,
                                              cudaMemcpyHostToDevice, stream_));

  // ---- scratch (padded steps: sized for the largest graph batch once) ----
  const int hidden = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int hd = c.head_dim, inter = c.intermediate_size;
  const size_t t_cap = static_cast<size_t>(p.padded ? std::max(p.T, kMaxDecodeGraphBatch) : p.T);
  const size_t r_cap = static_cast<size_t>(std::max(p.padded ? static_cast<int>(t_cap) : p.rows, 1));
  TANDEM_RETURN_IF_ERROR(ReserveTracked(residual_, t_cap * hidden * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(ReserveTracked(hidden_, t_cap * hidden * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(ReserveTracked(qkv_, t_cap * (nh + 2 * nkv) * hd * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(ReserveTracked(attn_, t_cap * nh * hd * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(ReserveTracked(gate_up_, t_cap * 2 * inter * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(ReserveTracked(act_, t_cap * inter * sizeof(bf16)));
  if (w_.fp8) {
    TANDEM_RETURN_IF_ERROR(ReserveTracked(
        fp8_scratch_, cuda::Fp8LinearScratchBytes(static_cast<int>(t_cap), std::max({hidden, inter, nh * hd}))));
  }
  TANDEM_RETURN_IF_ERROR(ReserveTracked(sel_, r_cap * hidden * sizeof(bf16)));
  TANDEM_RETURN_IF_ERROR(ReserveTracked(logits_, r_cap * vocab * sizeof(float)));
  TANDEM_RETURN_IF_ERROR(ReserveTracked(picks_, PicksBytes(p.picks_cap)));
  // ArgmaxLogSumExp's split rows (a 152k vocabulary is one SM's work per row otherwise).
  TANDEM_RETURN_IF_ERROR(ReserveTracked(lse_ws_, cuda::ArgmaxLogSumExpWorkspaceBytes(p.picks_cap)));
  if (p.decode_seqs() > 0) {
    cuda::PagedDecodeArgs probe;
    probe.num_seqs = p.decode_seqs();
    probe.num_heads = nh;
    probe.num_kv_heads = nkv;
    probe.head_dim = hd;
    probe.max_context_len = p.max_context_len;
    probe.num_splits = p.num_splits;
    if (fp8_kv_) probe.kv_pool_fp8 = kv_[0].as<uint8_t>();  // its kernel's split choice
    size_t ws = cuda::PagedDecodeWorkspaceBytes(probe);
    if (p.padded) ws = std::max(ws, size_t{8} << 20);  // covers every bucket of Qwen3-8B-like models
    const size_t had = workspace_.bytes();
    TANDEM_RETURN_IF_ERROR(ReserveTracked(workspace_, ws));
    if (workspace_.bytes() != had) {  // fresh memory: zero PagedDecode's merge counters once
      TANDEM_RETURN_IF_ERROR(
          cuda::PagedDecodeInitWorkspace(workspace_.as<void>(), workspace_.bytes(), stream_));
    }
  }

  // ---- the step: graph replay or eager ----
  const char* meta = dmeta.as<const char>();
  // A step that reports its layers' KV (layer-wise transfer) runs eagerly: the report is a host
  // call and an event recorded on the stream at that point, which a graph replay would not make.
  layer_hook_ = batch.on_layer_kv_written ? &batch.on_layer_kv_written : nullptr;
  if (p.padded && tuner_) TANDEM_RETURN_IF_ERROR(TuneProjections(p));
  Status run;
  clock.Lap("runner.inputs");
  // Kernel-group timing needs the events between the groups: eager launches of the same plan, or
  // graphs of their own captured with event nodes (step_timeline.h).
  // So does one whose layers wait for a layer-wise onboarding's copies (StartKvCopiesByLayer).
  if (p.padded && layer_hook_ == nullptr && !onboard_layers_pending_ &&
      (!timing_groups() || timing_groups_in_graphs())) {
    std::pair<int, int> key(bucket, stride_bucket * 4 + (p.rows > 0 ? 2 : 0) +
                                        (p.sample_rows > 0 ? 1 : 0));
    if (timing_groups()) key.first += 1 << 20;  // never a serving step's graph
    const int replays = graphs_.replays(), graphs = graphs_.num_graphs();
    run = graphs_.Run(key, graph_generation_, stream_, [&] { return RunModel(p, meta); });
    if (timing_groups()) {  // the marks a replay records are those of its capture
      if (graphs_.replays() > replays) timeline_marks_ = graph_marks_[key];
      if (graphs_.num_graphs() > graphs) graph_marks_[key] = capture_marks_;
      capture_marks_.clear();
    }
  } else {
    run = RunModel(p, meta);
    if (run.ok()) onboard_layers_pending_ = false;  // every layer waited for its copies
  }
  layer_hook_ = nullptr;
  TANDEM_RETURN_IF_ERROR(run);
  // The forward pass is enqueued (graph replay or eager) and runs while the host computes what the
  // picks need (structured outputs' masks, ForwardBatch::prepare_picks): only their upload waits.
  clock.Lap("runner.launch");
  if (picks) PreparePicks(batch);
  clock.Lap("runner.prepare_picks");
  TANDEM_RETURN_IF_ERROR(SampleOnDevice(p));

  // ---- results: top-k for the rows asking for log-probabilities, one copy back ----
  int topk = 0, topk_lo = 0, topk_hi = 0;
  for (size_t i = 0; i < p.arg_rows.size(); ++i) {
    if (p.arg_k[i] <= 0) continue;
    topk_lo = topk == 0 ? p.arg_rows[i] : std::min(topk_lo, p.arg_rows[i]);
    topk_hi = std::max(topk_hi, p.arg_rows[i] + 1);
    topk = std::max(topk, p.arg_k[i]);
  }
  topk = std::min(topk, std::min(vocab, 1024));  // TopK's limit; larger k: the host picks the rest
  const int topk_rows = topk > 0 ? topk_hi - topk_lo : 0;
  const size_t picks_bytes = PicksBytes(p.picks_cap);
  const size_t topk_bytes = static_cast<size_t>(topk_rows) * topk * (sizeof(int32_t) + sizeof(float));
  if (topk > 0) {
    TANDEM_RETURN_IF_ERROR(topk_.Reserve(topk_bytes));
    auto* tk_ids = topk_.as<int32_t>();
    auto* tk_vals = reinterpret_cast<float*>(tk_ids + static_cast<size_t>(topk_rows) * topk);
    TANDEM_RETURN_IF_ERROR(cuda::TopK(logits_.as<float>() + static_cast<size_t>(topk_lo) * vocab,
                                      vocab, topk_rows, vocab, topk, tk_ids, tk_vals, stream_));
  }
  TANDEM_RETURN_IF_ERROR(MarkGroup("sampling"));  // SampleOnDevice and TopK
  TANDEM_RETURN_IF_ERROR(host_picks_.Reserve(picks_bytes + topk_bytes));
  if (p.sample_rows > 0) {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_picks_.as<char>(), picks_.as<char>(),
                                                picks_bytes, cudaMemcpyDeviceToHost, stream_));
  }
  if (topk > 0) {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_picks_.as<char>() + picks_bytes,
                                                topk_.as<char>(), topk_bytes,
                                                cudaMemcpyDeviceToHost, stream_));
  }
  size_t returned = 0;
  for (const auto& run : p.out_runs) returned += static_cast<size_t>(run.second);
  out->logits.resize(returned * vocab);
  size_t at = 0;
  for (const auto& [row, count] : p.out_runs) {
    TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        out->logits.data() + at * vocab, logits_.as<float>() + static_cast<size_t>(row) * vocab,
        sizeof(float) * count * vocab, cudaMemcpyDeviceToHost, stream_));
    at += static_cast<size_t>(count);
  }
  TANDEM_RETURN_IF_ERROR(MarkGroup("copy_back"));
  clock.Lap("runner.sampling");
  TANDEM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  clock.Lap("runner.wait");
  TANDEM_RETURN_IF_ERROR(CollectGroups());

  const char* hp = host_picks_.as<const char>();
  const auto* pick_ids = reinterpret_cast<const int32_t*>(hp);
  const auto* pick_max = reinterpret_cast<const float*>(hp + Align16(sizeof(float) * p.picks_cap));
  const auto* pick_lse = reinterpret_cast<const float*>(hp + 2 * Align16(sizeof(float) * p.picks_cap));
  const auto* pick_status =
      reinterpret_cast<const int32_t*>(hp + 3 * Align16(sizeof(float) * p.picks_cap));
  const auto* tk_ids = reinterpret_cast<const int32_t*>(hp + picks_bytes);
  const auto* tk_vals = reinterpret_cast<const float*>(tk_ids + static_cast<size_t>(topk_rows) * topk);
  for (size_t i = 0; i < p.arg_rows.size(); ++i) {
    const int row = p.arg_rows[i];
    const int k = p.arg_k[i];
    const int r = row - p.sample_begin;
    // Beyond TopK's limit, or a sampled row with more candidates than SampleRows sorts: this
    // row's pick on the host (the logits there are the raw ones again).
    if (k > topk || (p.sampled && pick_status[r] != cuda::kSamplePicked)) {
      std::vector<float> logits_row(vocab);
      TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpy(logits_row.data(),
                                             logits_.as<float>() + static_cast<size_t>(row) * vocab,
                                             sizeof(float) * vocab, cudaMemcpyDeviceToHost));
      out->samples.push_back(PickToken(logits_row, k, p.arg_pick[i]));
      continue;
    }
    ArgmaxSample s;
    s.token_id = pick_ids[r];
    if (k >= 0) {
      s.logprob = pick_max[r] - pick_lse[r];
      const size_t tr = static_cast<size_t>(row - topk_lo) * topk;
      for (int j = 0; j < k; ++j) s.top.emplace_back(tk_ids[tr + j], tk_vals[tr + j] - pick_lse[r]);
    }
    out->samples.push_back(std::move(s));
  }
  clock.Lap("runner.unpack");
  return Status::Ok();
}

Status CudaModelRunner::SampleOnDevice(StepPlan& p) {
  bool any = false;
  size_t num_entries = 0, num_masks = 0, mask_words = 0;
  for (const PickSpec* s : p.arg_pick) {
    if (s == nullptr) continue;
    any = true;
    if (s->has_penalties()) num_entries += s->penalties.size();
    if (s->has_mask()) {
      ++num_masks;
      mask_words = std::max(mask_words, s->allowed.size());
    }
  }
  if (!any || p.sample_rows == 0) return Status::Ok();
  const int vocab = config_.vocab_size;
  const int R = p.sample_rows;
  // One pinned staging area, one upload: specs [R] (padding and greedy rows: greedy), entries,
  // then with structured rows the mask index of each row [R] (-1: none) and the masks.
  const size_t spec_bytes = Align16(sizeof(cuda::SampleRowSpec) * R);
  const size_t entry_bytes = Align16(sizeof(cuda::PenaltyRowEntry) * std::max<size_t>(num_entries, 1));
  const size_t index_bytes = num_masks > 0 ? Align16(sizeof(int32_t) * R) : 0;
  const size_t mask_bytes = Align16(sizeof(uint32_t) * num_masks * mask_words);
  const size_t upload_bytes = spec_bytes + entry_bytes + index_bytes + mask_bytes;
  const size_t saved_bytes = Align16(sizeof(float) * std::max<size_t>(num_entries, 1));
  TANDEM_RETURN_IF_ERROR(host_sample_.Reserve(upload_bytes));
  TANDEM_RETURN_IF_ERROR(sample_.Reserve(upload_bytes + saved_bytes));
  auto* specs = host_sample_.as<cuda::SampleRowSpec>();
  auto* entries = reinterpret_cast<cuda::PenaltyRowEntry*>(host_sample_.as<char>() + spec_bytes);
  auto* mask_of_row = reinterpret_cast<int32_t*>(host_sample_.as<char>() + spec_bytes + entry_bytes);
  auto* masks = reinterpret_cast<uint32_t*>(host_sample_.as<char>() + spec_bytes + entry_bytes +
                                            index_bytes);
  std::fill_n(specs, R, cuda::SampleRowSpec{});
  if (num_masks > 0) std::fill_n(mask_of_row, R, -1);
  size_t e = 0;
  int32_t m = 0;
  for (size_t i = 0; i < p.arg_rows.size(); ++i) {
    const PickSpec* s = p.arg_pick[i];
    if (s == nullptr) continue;
    const int r = p.arg_rows[i] - p.sample_begin;
    if (s->has_mask()) {  // a shorter mask (none should be) leaves its tail disallowed
      uint32_t* dst = masks + static_cast<size_t>(m) * mask_words;
      std::copy(s->allowed.begin(), s->allowed.end(), dst);
      std::fill(dst + s->allowed.size(), dst + mask_words, 0u);
      mask_of_row[r] = m++;
    }
    cuda::SampleRowSpec& d = specs[r];
    d.u = s->u;
    d.temperature = s->sample.temperature;
    d.top_p = s->sample.top_p;
    d.top_k = s->sample.top_k;
    d.min_p = s->sample.min_p;
    if (!s->has_penalties()) continue;
    d.repetition_penalty = s->repetition_penalty;
    d.frequency_penalty = s->frequency_penalty;
    d.presence_penalty = s->presence_penalty;
    for (const cpu::PenaltyEntry& pe : s->penalties) {
      entries[e++] = cuda::PenaltyRowEntry{r, pe.token_id, pe.output_count};
    }
  }
  char* dbase = sample_.as<char>();
  const auto* d_specs = reinterpret_cast<const cuda::SampleRowSpec*>(dbase);
  const auto* d_entries = reinterpret_cast<const cuda::PenaltyRowEntry*>(dbase + spec_bytes);
  const auto* d_mask_of_row = reinterpret_cast<const int32_t*>(dbase + spec_bytes + entry_bytes);
  const auto* d_masks =
      reinterpret_cast<const uint32_t*>(dbase + spec_bytes + entry_bytes + index_bytes);
  auto* d_saved = reinterpret_cast<float*>(dbase + upload_bytes);
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dbase, host_sample_.as<char>(), upload_bytes,
                                              cudaMemcpyHostToDevice, stream_));
  float* rows = logits_.as<float>() + static_cast<size_t>(p.sample_begin) * vocab;
  char* picks = picks_.as<char>();
  const size_t col = Align16(sizeof(float) * p.picks_cap);
  auto* ids = reinterpret_cast<int32_t*>(picks);
  auto* chosen = reinterpret_cast<float*>(picks + col);  // was the max: logprob = chosen - lse
  auto* status = reinterpret_cast<int32_t*>(picks + 3 * col);
  const int n_e = static_cast<int>(num_entries);
  TANDEM_RETURN_IF_ERROR(
      cuda::ApplyPenaltiesSaving(rows, vocab, d_specs, d_entries, n_e, d_saved, stream_));
  if (num_masks > 0) {  // after the penalties, as the host route (engine.cc SampleAndProcess)
    TANDEM_RETURN_IF_ERROR(cuda::ApplyTokenBitmask(rows, vocab, R, vocab, d_masks,
                                                   static_cast<int>(mask_words), d_mask_of_row,
                                                   stream_));
  }
  TANDEM_RETURN_IF_ERROR(cuda::SampleRows(rows, vocab, R, vocab, d_specs, ids, status, stream_));
  TANDEM_RETURN_IF_ERROR(cuda::RestorePenalties(rows, vocab, d_entries, n_e, d_saved, stream_));
  TANDEM_RETURN_IF_ERROR(cuda::ChosenLogits(rows, vocab, R, ids, chosen, stream_));
  p.sampled = true;
  return Status::Ok();
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
