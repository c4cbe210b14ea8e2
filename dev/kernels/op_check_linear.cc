// cuda_op_check "linear": cuda::Linear and its two paths (cuBLAS; the skinny-GEMM "GEMV" of
// gemv.h for m <= 16) against cpu::Linear on sampled rows (all rows for m <= 16).
//
// Qwen3-8B projections at decode sizes m = 1, 2, 4, 8, 16: one row per path, `gemv` (automatic
// k split, named in the shape) and `cublas`, each timed; the gemv row's note gives the speedup over
// cuBLAS and the time with every k split (ks 1/2/4/8), to tune GemvAutoSplit and TANDEM_GEMV_MAX_M.
// L2 honesty: the H200's L2 (~50-60 MB) holds o (32 MB) and qkv (48 MB) entirely, so a timing loop
// on one weight would read it from L2; the timed calls rotate over enough identical copies of W
// (>= 256 MB in all, "W xN" in the note) that each call reads W from HBM, as a decode step does.
// x (<= 400 KB) stays cache-resident, as it does in the model. Larger m: cuda::Linear (cuBLAS),
// and for m <= 256 also a "tuned" row: Linear with a GemmTuner (gemm_tune.h) that timed this shape.
// --small (the CPU emulator): odd n and k, strided x / y, bias, fp32 out, every k split, m up to
// 16, and the cuBLAS fallbacks (k % 8 != 0, unaligned x), with the dispatch checked bit for bit.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "kernels/cpu/matmul.h"
#include "kernels/cuda/gemm_tune.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/linear.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

// bf16 inputs are exact in fp32; the GEMM accumulates in fp32 (error ~ sqrt(k) * 2^-24 relative)
// and rounds the output to bf16 once (2^-9): well under 1e-2.
constexpr double kTolLinear = 1e-2;
constexpr int kRefRows = 16;  // rows of the output checked against the CPU (all rows for m <= 16)
constexpr int kTunedMaxM = 256;  // the "tuned" rows: decode batch sizes (kMaxDecodeGraphBatch)
constexpr double kL2RotateBytes = 256e6;

cuda::CublasHandle& Handle() {
  static Result<cuda::CublasHandle> h = cuda::CublasHandle::Create();
  if (!h.ok()) {
    std::fprintf(stderr, "FATAL cublas: %s\n", h.status().ToString().c_str());
    std::exit(2);
  }
  return *h;
}

enum class Path { kLinear, kGemv, kCublas };

struct Shape {
  const char* label;
  int n, k;
  bool bias;
  cuda::OutDtype out;
  int ldx_pad = 0;   // ldx = k + ldx_pad
  int ldy_pad = 0;   // ldy = n + ldy_pad (the padding must stay untouched)
  int x_offset = 0;  // x starts this many elements into its buffer (1: not 16-byte aligned)
};

// Inputs and output of one shape, the weight in `copies` identical buffers.
struct Fixture {
  Fixture(const Shape& s, int max_m, int copies) : s(s), ldx(s.k + s.ldx_pad), ldy(s.n + s.ldy_pad) {
    x = DevBuf<bf16>(static_cast<size_t>(max_m) * ldx + s.x_offset);
    FillUniform(x.get(), x.size(), NextSeed(), -1.0f, 1.0f);
    w.emplace_back(static_cast<size_t>(s.n) * s.k);
    FillUniform(w[0].get(), w[0].size(), NextSeed(), -0.05f, 0.05f);
    for (int c = 1; c < copies; ++c) {
      w.emplace_back(w[0].size());
      OC_CUDA(cudaMemcpy(w[c].get(), w[0].get(), w[0].bytes(), cudaMemcpyDeviceToDevice));
    }
    if (s.bias) {
      b = DevBuf<bf16>(s.n);
      FillUniform(b.get(), s.n, NextSeed(), -1.0f, 1.0f);
      bf = DownloadFloat(b);
    }
    const size_t ysize = static_cast<size_t>(max_m) * ldy;
    if (s.out == cuda::OutDtype::kFloat32) y32 = DevBuf<float>(ysize); else y16 = DevBuf<bf16>(ysize);
    xf = DownloadFloat(x);
    wf = DownloadFloat(w[0]);
  }

  cuda::LinearArgs Args(int m, int copy) const {
    cuda::LinearArgs a;
    a.x = x.get() + s.x_offset;
    a.ldx = ldx;
    a.w = w[copy].get();
    a.bias = s.bias ? b.get() : nullptr;
    a.y = y32.size() > 0 ? static_cast<void*>(y32.get()) : static_cast<void*>(y16.get());
    a.ldy = ldy;
    a.out_dtype = s.out;
    a.m = m;
    a.n = s.n;
    a.k = s.k;
    return a;
  }

  Status Run(Path p, int k_split, int m, int copy, cudaStream_t stream = nullptr) const {
    const cuda::LinearArgs a = Args(m, copy);
    switch (p) {
      case Path::kGemv: return cuda::LinearGemv(a, k_split, stream);
      case Path::kCublas: return cuda::LinearCublas(Handle(), a, stream);
      default: return cuda::Linear(Handle(), a, stream);
    }
  }

  void Poison() { y32.size() > 0 ? y32.Poison() : y16.Poison(); }
  // The whole y buffer as raw bits (padding included) and as floats.
  std::vector<uint32_t> Bits() const {
    std::vector<uint32_t> bits;
    if (y32.size() > 0) {
      const auto v = y32.Download();
      bits.resize(v.size());
      std::memcpy(bits.data(), v.data(), v.size() * 4);
    } else {
      const auto v = y16.Download();
      bits.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) bits[i] = reinterpret_cast<const uint16_t*>(v.data())[i];
    }
    return bits;
  }
  float Value(uint32_t bits) const {
    if (y32.size() == 0) return Bf16ToFloat(static_cast<uint16_t>(bits));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }

  Shape s;
  int64_t ldx, ldy;
  DevBuf<bf16> x, b, y16;
  std::vector<DevBuf<bf16>> w;
  DevBuf<float> y32;
  std::vector<float> xf, wf, bf;
};

// The CPU reference on sampled rows of an m-row product.
struct Reference {
  std::vector<int> rows;
  std::vector<float> ref;  // [rows, n]
};

Reference MakeReference(const Fixture& f, int m, std::mt19937& rng) {
  Reference r;
  if (m <= kRefRows) {
    for (int i = 0; i < m; ++i) r.rows.push_back(i);
  } else {
    r.rows = {0, m - 1};
    while (static_cast<int>(r.rows.size()) < kRefRows / 2) {
      r.rows.push_back(std::uniform_int_distribution<int>(1, m - 2)(rng));
    }
  }
  const int R = static_cast<int>(r.rows.size()), k = f.s.k, n = f.s.n;
  std::vector<float> xs(static_cast<size_t>(R) * k);
  for (int i = 0; i < R; ++i) {
    std::copy_n(f.xf.begin() + f.s.x_offset + r.rows[i] * f.ldx, k, xs.begin() + static_cast<size_t>(i) * k);
  }
  r.ref.resize(static_cast<size_t>(R) * n);
  cpu::Linear(xs.data(), R, k, f.wf.data(), n, f.s.bias ? f.bf.data() : nullptr, r.ref.data());
  return r;
}

// Runs one path once (W copy 0) and checks it; `bits` receives the output for bitwise comparisons.
Row CheckPath(Fixture& f, const Reference& ref, Path p, int k_split, int m, const std::string& shape,
              std::vector<uint32_t>* bits) {
  f.Poison();
  OC_OK(f.Run(p, k_split, m, 0));
  OC_CUDA(cudaDeviceSynchronize());
  *bits = f.Bits();
  const int n = f.s.n;
  Row row{"linear", shape};
  long unwritten = 0, pad_written = 0;  // every element of the m x n output written, padding not
  const uint32_t poison = f.y32.size() > 0 ? 0xffffffffu : 0xffffu;
  for (int i = 0; i < m; ++i) {
    for (int64_t j = 0; j < f.ldy; ++j) {
      const uint32_t v = (*bits)[static_cast<size_t>(i) * f.ldy + j];
      if (j < n) unwritten += std::isfinite(f.Value(v)) ? 0 : 1;
      else pad_written += v != poison ? 1 : 0;
    }
  }
  std::vector<float> out(ref.ref.size());
  for (size_t r = 0; r < ref.rows.size(); ++r) {
    for (int j = 0; j < n; ++j) {
      out[r * n + j] = f.Value((*bits)[static_cast<size_t>(ref.rows[r]) * f.ldy + j]);
    }
  }
  row.err = Compare(out, ref.ref);
  if (unwritten > 0) row.note = std::to_string(unwritten) + " non-finite outputs";
  if (pad_written > 0) row.note += std::to_string(pad_written) + " padding elements written";
  row.tol = kTolLinear;
  row.pass = row.err.non_finite == 0 && unwritten == 0 && pad_written == 0 && row.err.rel <= row.tol;
  return row;
}

// The tuner of the "tuned" rows (gemm_tune.h), with a cuBLAS-sized workspace of its own.
cuda::GemmTuner* Tuner() {
  static DevBuf<char> workspace(size_t{32} << 20);
  static std::unique_ptr<cuda::GemmTuner> tuner = [] {
    auto t = cuda::GemmTuner::Create(workspace.get(), workspace.size());
    return t.ok() ? std::move(*t) : nullptr;
  }();
  return tuner.get();
}

double Time(const Fixture& f, Path p, int k_split, int m) {
  int call = 0;
  const int copies = static_cast<int>(f.w.size());
  return TimeUs([&] { OC_OK(f.Run(p, k_split, m, call++ % copies)); });
}

// The same in a CUDA graph of back-to-back launches; one_copy: W copy 0 every time (L2-resident
// where it fits), else rotated as Time.
double TimeGraph(const Fixture& f, Path p, int k_split, int m, bool one_copy) {
  int call = 0;
  const int copies = one_copy ? 1 : static_cast<int>(f.w.size());
  return TimeUsGraph([&](cudaStream_t st) { OC_OK(f.Run(p, k_split, m, call++ % copies, st)); });
}

double Bytes(const Fixture& f, int m) {
  return (static_cast<double>(f.s.n) * f.s.k + static_cast<double>(m) * f.s.k) * sizeof(bf16) +
         static_cast<double>(m) * f.s.n * (f.s.out == cuda::OutDtype::kFloat32 ? 4 : 2);
}

std::string ShapeText(const Shape& s, int m, const char* path) {
  char text[160];
  std::snprintf(text, sizeof(text), "%s m %d n %d k %d%s%s%s %s", s.label, m, s.n, s.k,
                s.bias ? " +bias" : "", s.out == cuda::OutDtype::kFloat32 ? " f32" : "",
                s.ldx_pad || s.ldy_pad ? " strided" : "", path);
  return text;
}

// Decode sizes (m <= 16): gemv and cublas side by side, timed with W rotated out of L2; larger m:
// cuda::Linear as the model calls it (cuBLAS), timed on one W.
void TimedCase(const Shape& s, const std::vector<int>& ms) {
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const double w_bytes = 2.0 * s.n * s.k;
  const int copies = std::clamp(static_cast<int>(std::ceil(kL2RotateBytes / w_bytes)), 1, 8);
  Fixture f(s, max_m, copies);
  std::mt19937 rng(NextSeed());
  std::vector<uint32_t> bits;
  for (int m : ms) {
    const Reference ref = MakeReference(f, m, rng);
    if (m > cuda::kGemvMaxRows) {
      Row row = CheckPath(f, ref, Path::kLinear, 0, m, ShapeText(s, m, "linear"), &bits);
      row.time_us = Time(f, Path::kLinear, 0, m);
      if (m >= 64) row.flops = 2.0 * m * s.n * s.k; else row.bytes = Bytes(f, m);
      Record(row);
      // Decode batch sizes: Linear with the GemmTuner the CUDA runner uses for padded steps.
      if (m <= kTunedMaxM && Tuner() != nullptr) {
        std::vector<const bf16*> copies;  // W from HBM in the tuner's timing too
        for (const auto& w : f.w) copies.push_back(w.get());
        OC_OK(Tuner()->Tune(Handle(), f.Args(m, 0), nullptr, copies));
        Handle().set_tuner(Tuner());
        Row tuned = CheckPath(f, ref, Path::kLinear, 0, m, ShapeText(s, m, "tuned"), &bits);
        tuned.time_us = Time(f, Path::kLinear, 0, m);
        Handle().set_tuner(nullptr);
        tuned.flops = row.flops;
        tuned.bytes = row.bytes;
        double gemmex_us = 0, best_us = 0;
        Tuner()->Measured(f.Args(m, 0), &gemmex_us, &best_us);
        char note[160];
        std::snprintf(note, sizeof(note), "x%.2f vs linear; tuner's own timing (W rotated): gemmex %.1f us, kept %.1f us%s",
                      row.time_us / tuned.time_us, gemmex_us, best_us,
                      best_us < gemmex_us ? " (cuBLASLt)" : " (gemmex kept)");
        tuned.note = note;
        Record(tuned);
      }
      continue;
    }
    const int auto_ks = cuda::LinearGemvAutoSplit(f.Args(m, 0));
    Row cublas = CheckPath(f, ref, Path::kCublas, 0, m, ShapeText(s, m, "cublas"), &bits);
    cublas.time_us = Time(f, Path::kCublas, 0, m);
    cublas.bytes = Bytes(f, m);
    const std::string tag = "gemv ks" + std::to_string(auto_ks);
    Row gemv = CheckPath(f, ref, Path::kGemv, 0, m, ShapeText(s, m, tag.c_str()), &bits);
    gemv.time_us = Time(f, Path::kGemv, 0, m);
    gemv.bytes = Bytes(f, m);
    char note[256];
    int len = std::snprintf(note, sizeof(note), "x%.2f vs cublas%s; ks 1/2/4/8:",
                            cublas.time_us / gemv.time_us,
                            m <= cuda::GemvMaxM() ? " (Linear uses gemv)" : "");
    for (int ks = 1; ks <= 8; ks *= 2) {
      len += std::snprintf(note + len, sizeof(note) - len, "%s%.1f", ks > 1 ? "/" : " ",
                           Time(f, Path::kGemv, ks, m));
    }
    len += std::snprintf(note + len, sizeof(note) - len, " us; W x%d", copies);
    if (m <= 8) {
      // Where the time goes: back-to-back launches in a graph, W rotated vs one W (from L2 where
      // it fits). On the H200 o_proj (34 MB) took 11.4 us rotated and 9.9 from L2 at m = 1
      // (results/2026-12-02o): the kernel's fixed cost, not HBM, is most of what it loses.
      std::snprintf(note + len, sizeof(note) - len, "; graph: %.1f us, one W %.1f us",
                    TimeGraph(f, Path::kGemv, 0, m, false), TimeGraph(f, Path::kGemv, 0, m, true));
    }
    if (!gemv.note.empty()) gemv.note += "; ";
    gemv.note += note;
    Record(gemv);
    Record(cublas);
  }
}

// Small shapes, no timing: the dispatch (bitwise against the path it should take), every k split
// of the GEMV for m <= 16, and cuBLAS.
void SmallCase(const Shape& s, const std::vector<int>& ms, bool gemv_expected) {
  const int max_m = *std::max_element(ms.begin(), ms.end());
  Fixture f(s, max_m, 1);
  std::mt19937 rng(NextSeed());
  for (int m : ms) {
    const Reference ref = MakeReference(f, m, rng);
    const cuda::LinearArgs a = f.Args(m, 0);
    const bool supported = cuda::detail::GemvSupported(a);
    std::vector<uint32_t> linear_bits, bits;
    const bool to_gemv = supported && m <= cuda::GemvMaxM();
    Row linear = CheckPath(f, ref, Path::kLinear, 0, m,
                           ShapeText(s, m, to_gemv ? "linear->gemv" : "linear->cublas"), &linear_bits);
    if (supported != gemv_expected) {
      linear.pass = false;
      linear.note = supported ? "GemvSupported unexpectedly" : "GemvSupported false unexpectedly";
    }
    if (supported) {
      const int auto_ks = cuda::LinearGemvAutoSplit(a);
      for (int ks = 1; ks <= 8; ks *= 2) {
        Row row = CheckPath(f, ref, Path::kGemv, ks, m,
                            ShapeText(s, m, ("gemv ks" + std::to_string(ks)).c_str()), &bits);
        if (to_gemv && ks == auto_ks && bits != linear_bits) {
          linear.pass = false;
          linear.note = "dispatch output differs from gemv ks" + std::to_string(ks);
        }
        Record(row);
      }
    } else {
      const Status st = cuda::LinearGemv(a, 0, nullptr);
      if (st.code() != StatusCode::kInvalidArgument) {
        linear.pass = false;
        linear.note = "LinearGemv accepted an unsupported shape: " + st.ToString();
      }
    }
    Row cublas = CheckPath(f, ref, Path::kCublas, 0, m, ShapeText(s, m, "cublas"), &bits);
    if (!to_gemv && bits != linear_bits) {
      linear.pass = false;
      linear.note = "dispatch output differs from cublas";
    }
    Record(linear);
    Record(cublas);
  }
}

}  // namespace

void CheckLinear() {
  using cuda::OutDtype;
  // Qwen3-8B projections: qkv, o, gate_up, down, lm_head (fp32 logits).
  if (!Small()) {
    TimedCase({"qkv", 6144, 4096, false, OutDtype::kBf16}, {1, 2, 4, 8, 16, 32, 64, 256, 2048});
    TimedCase({"o", 4096, 4096, false, OutDtype::kBf16}, {1, 2, 4, 8, 16, 32, 64, 256, 2048});
    TimedCase({"gate_up", 24576, 4096, false, OutDtype::kBf16}, {1, 2, 4, 8, 16, 64, 256, 2048});
    TimedCase({"down", 4096, 12288, false, OutDtype::kBf16}, {1, 2, 4, 8, 16, 32, 64, 256, 2048});
    TimedCase({"lm_head", 151936, 4096, false, OutDtype::kFloat32}, {1, 2, 4, 8, 16, 64, 256});
    TimedCase({"8192^3", 8192, 8192, false, OutDtype::kBf16}, {8192});  // DESIGN.md ceiling
  }
  // GEMV: n not a multiple of 16, k not a multiple of 32 (partial steps), bias, m up to 16.
  SmallCase({"odd", 200, 264, true, OutDtype::kBf16}, {1, 3, 8, 9, 16}, true);
  // Strided x and y, fp32 out, k smaller than one step per slice at ks 8.
  SmallCase({"strided", 72, 128, false, OutDtype::kFloat32, 24, 5}, {2, 5, 13}, true);
  // A single tile of rows, long k (the automatic split is at its maximum).
  SmallCase({"n8", 8, 4096, true, OutDtype::kBf16}, {1, 4}, true);
  // cuBLAS fallbacks: k % 8 != 0; x not 16-byte aligned.
  SmallCase({"k333", 100, 333, true, OutDtype::kBf16}, {3}, false);
  SmallCase({"x+1", 48, 64, false, OutDtype::kFloat32, 0, 0, 1}, {2}, false);
  // cuBLAS at larger m (bias added by a second kernel).
  SmallCase({"odd", 1000, 333, true, OutDtype::kBf16}, {37}, false);
  SmallCase({"qkv bias", 4608, 3584, true, OutDtype::kFloat32}, {19}, false);
}

}  // namespace tandem::opcheck
