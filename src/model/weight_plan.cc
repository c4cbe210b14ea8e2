#include "model/weight_plan.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include "model/weights.h"

namespace tandem {

uint16_t FloatToBfloat16Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x0040u);  // NaN
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest, ties to even (overflow gives inf)
  return static_cast<uint16_t>(b >> 16);
}

void ConvertToBf16(const TensorView& t, int64_t begin, int64_t count, uint16_t* out) {
  switch (t.dtype) {
    case DType::kBF16:
      std::memcpy(out, t.data + begin * 2, static_cast<size_t>(count) * 2);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + (begin + i) * 2, 2);
        out[i] = FloatToBfloat16Bits(HalfToFloat(h));
      }
      return;
    case DType::kF32:
      for (int64_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, t.data + (begin + i) * 4, 4);
        out[i] = FloatToBfloat16Bits(f);
      }
      return;
    case DType::kF8E4M3:
    case DType::kOther:
      break;  // refused by PlanBf16Weights
  }
  std::fill_n(out, count, uint16_t{0});
}

std::vector<const DeviceTensorPlan*> WeightPlan::tensors() const {
  std::vector<const DeviceTensorPlan*> out;
  auto add = [&out](const DeviceTensorPlan& t) {
    if (!t.parts.empty()) out.push_back(&t);
  };
  add(embed);
  for (const LayerPlan& l : layers) {
    for (const DeviceTensorPlan* t : {&l.input_norm, &l.qkv, &l.qkv_bias, &l.o, &l.o_bias,
                                      &l.q_norm, &l.k_norm, &l.post_norm, &l.gate_up, &l.down}) {
      add(*t);
    }
  }
  add(final_norm);
  add(lm_head);
  return out;
}

size_t WeightPlan::total_bytes() const {
  size_t n = 0;
  for (const DeviceTensorPlan* t : tensors()) n += t->bytes();
  return n;
}

namespace {

struct Source {
  std::string name;
  std::vector<int64_t> shape;
};

// A device tensor made of `sources` laid end to end.
Status Plan(const SafetensorsModel& st, std::string name, const std::vector<Source>& sources,
            DeviceTensorPlan* out) {
  out->name = std::move(name);
  out->num_elements = 0;
  out->parts.clear();
  for (const Source& s : sources) {
    TANDEM_ASSIGN_OR_RETURN(const TensorView* t, FindWeight(st, s.name, s.shape));
    if (t->dtype == DType::kF8E4M3) {
      return Err(StatusCode::kUnimplemented,
                 "tensor {} in {} is FP8 (F8_E4M3): the CUDA engine runs FP8 only in the layers' "
                 "projections, and only with a quantization_config in config.json saying how they are "
                 "scaled (--device cpu dequantizes FP8 tensors it can scale)", t->name, t->file);
    }
    if (t->dtype == DType::kOther) {
      return Err(StatusCode::kUnimplemented,
                 "tensor {} in {} has dtype {}, which is not supported (BF16, F16, F32, F8_E4M3)", t->name,
                 t->file, t->dtype_name);
    }
    out->parts.push_back(WeightPart{t, out->num_elements});
    out->num_elements += t->num_elements();
  }
  return Status::Ok();
}

}  // namespace

Result<WeightPlan> PlanBf16Weights(const SafetensorsModel& st, const ModelConfig& c, bool skip_linears) {
  const int64_t hidden = c.hidden_size;
  const int64_t q_dim = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  const int64_t inter = c.intermediate_size;
  const bool o_bias = c.attention_bias && c.architecture != "Qwen2ForCausalLM";

  // The same tensors, in the same order, as LoadModelWeights (so the first error is the same).
  WeightPlan w;
  TANDEM_RETURN_IF_ERROR(
      Plan(st, "embed", {{"model.embed_tokens.weight", {c.vocab_size, hidden}}}, &w.embed));
  w.layers.resize(c.num_hidden_layers);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerPlan& l = w.layers[i];
    const std::string p = fmt::format("model.layers.{}.", i);
    const std::string n = fmt::format("layers.{}.", i);
    TANDEM_RETURN_IF_ERROR(
        Plan(st, n + "input_norm", {{p + "input_layernorm.weight", {hidden}}}, &l.input_norm));
    if (!skip_linears) TANDEM_RETURN_IF_ERROR(Plan(st, n + "qkv",
                                {{p + "self_attn.q_proj.weight", {q_dim, hidden}},
                                 {p + "self_attn.k_proj.weight", {kv_dim, hidden}},
                                 {p + "self_attn.v_proj.weight", {kv_dim, hidden}}},
                                &l.qkv));
    if (!skip_linears) {
      TANDEM_RETURN_IF_ERROR(Plan(st, n + "o", {{p + "self_attn.o_proj.weight", {hidden, q_dim}}}, &l.o));
    }
    if (c.attention_bias) {
      TANDEM_RETURN_IF_ERROR(Plan(st, n + "qkv_bias",
                                  {{p + "self_attn.q_proj.bias", {q_dim}},
                                   {p + "self_attn.k_proj.bias", {kv_dim}},
                                   {p + "self_attn.v_proj.bias", {kv_dim}}},
                                  &l.qkv_bias));
    }
    if (o_bias) {
      TANDEM_RETURN_IF_ERROR(
          Plan(st, n + "o_bias", {{p + "self_attn.o_proj.bias", {hidden}}}, &l.o_bias));
    }
    if (c.qk_norm) {
      TANDEM_RETURN_IF_ERROR(
          Plan(st, n + "q_norm", {{p + "self_attn.q_norm.weight", {c.head_dim}}}, &l.q_norm));
      TANDEM_RETURN_IF_ERROR(
          Plan(st, n + "k_norm", {{p + "self_attn.k_norm.weight", {c.head_dim}}}, &l.k_norm));
    }
    TANDEM_RETURN_IF_ERROR(Plan(st, n + "post_norm",
                                {{p + "post_attention_layernorm.weight", {hidden}}}, &l.post_norm));
    if (!skip_linears) TANDEM_RETURN_IF_ERROR(Plan(st, n + "gate_up",
                                {{p + "mlp.gate_proj.weight", {inter, hidden}},
                                 {p + "mlp.up_proj.weight", {inter, hidden}}},
                                &l.gate_up));
    if (!skip_linears) {
      TANDEM_RETURN_IF_ERROR(Plan(st, n + "down", {{p + "mlp.down_proj.weight", {hidden, inter}}}, &l.down));
    }
  }
  TANDEM_RETURN_IF_ERROR(Plan(st, "final_norm", {{"model.norm.weight", {hidden}}}, &w.final_norm));
  if (!c.tie_word_embeddings) {
    TANDEM_RETURN_IF_ERROR(
        Plan(st, "lm_head", {{"lm_head.weight", {c.vocab_size, hidden}}}, &w.lm_head));
  }
  return w;
}

std::vector<StagingChunk> ScheduleStaging(const WeightPlan& plan, size_t chunk_bytes) {
  chunk_bytes = std::max<size_t>(2, chunk_bytes / 2 * 2);
  const int64_t chunk_elems = static_cast<int64_t>(chunk_bytes / 2);
  struct Item {
    const DeviceTensorPlan* tensor;
    const WeightPart* part;
  };
  std::vector<Item> items;
  for (const DeviceTensorPlan* t : plan.tensors()) {
    for (const WeightPart& p : t->parts) items.push_back({t, &p});
  }
  // File order: by file name, then by address inside the mapping.
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.part->src->file != b.part->src->file) return a.part->src->file < b.part->src->file;
    return a.part->src->data < b.part->src->data;
  });
  std::vector<StagingChunk> chunks;
  int64_t used = chunk_elems;  // elements used in chunks.back(); full: start a new chunk
  for (const Item& item : items) {
    const TensorView& src = *item.part->src;
    const int64_t n = src.num_elements();
    for (int64_t begin = 0; begin < n;) {
      if (used == chunk_elems) {
        chunks.emplace_back();
        used = 0;
      }
      const int64_t count = std::min(n - begin, chunk_elems - used);
      StagingPiece piece;
      piece.tensor = item.tensor;
      piece.src = &src;
      piece.src_begin = begin;
      piece.count = count;
      piece.dst_offset = item.part->dst_offset + begin;
      piece.staging_offset = static_cast<size_t>(used) * 2;
      chunks.back().pieces.push_back(piece);
      used += count;
      chunks.back().bytes = static_cast<size_t>(used) * 2;
      begin += count;
    }
  }
  return chunks;
}

void FillStagingChunk(const StagingChunk& chunk, uint16_t* buffer, int num_threads) {
  const int64_t total = static_cast<int64_t>(chunk.bytes / 2);
  num_threads = static_cast<int>(std::clamp<int64_t>(num_threads, 1, std::max<int64_t>(total, 1)));
  // Thread t converts elements [lo, hi) of the buffer: the parts of pieces that fall there.
  auto fill = [&chunk, buffer](int64_t lo, int64_t hi) {
    for (const StagingPiece& p : chunk.pieces) {
      const int64_t begin = static_cast<int64_t>(p.staging_offset / 2);
      const int64_t a = std::max(lo, begin), b = std::min(hi, begin + p.count);
      if (a < b) ConvertToBf16(*p.src, p.src_begin + (a - begin), b - a, buffer + a);
    }
  };
  if (num_threads == 1) {
    fill(0, total);
    return;
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < num_threads; ++t) {
    threads.emplace_back(fill, total * t / num_threads, total * (t + 1) / num_threads);
  }
  for (std::thread& th : threads) th.join();
}

void ReleaseChunkSources(const StagingChunk& chunk) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const StagingPiece& p : chunk.pieces) {
    const size_t elem = p.src->dtype == DType::kF32 ? 4 : 2;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p.src->data) + p.src_begin * elem;
    const uintptr_t end = begin + static_cast<uintptr_t>(p.count) * elem;
    const uintptr_t lo = begin / page * page, hi = (end + page - 1) / page * page;
    // Pages shared with a neighbour piece are faulted back in if it still needs them.
    ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }
}

}  // namespace tandem
