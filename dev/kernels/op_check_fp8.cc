// cuda_op_check "fp8": the FP8 linear layer of fp8_linear.h against CPU references.
//
// Weights: random floats quantized on the host by kernels/cpu/fp8.h (per output channel, or in
// 128 x 128 blocks with a host block quantizer below), the reference weight their dequantization
// (cpu::DequantizeFp8E4M3). Rows:
//   fp8_quant   the activation quantizer (per token, per 128-column group) against the same float
//               operations on the host with cpu::FloatToFp8E4M3: codes and scales bit for bit.
//   fp8_dequant DequantizeFp8Weight against the host dequantization rounded to bf16: bit for bit.
//   fp8_gemv    the weight-only GEMV (every k split) against cpu::Linear with the dequantized
//               weight and the bf16 x: exact products, fp32 sums, tol 1e-2 as the bf16 GEMV.
//   fp8_gemm    cuBLASLt W8A8 (sm_90 only): against cpu::Linear on x quantized as the kernel does
//               (codes times scales), tol 1e-2; the note gives the error against the unquantized
//               x (what FP8 activations cost).
//   fp8_layout  which of the activation-scale layouts (fp8_linear.h Fp8GemmLayout) and weight
//               block-scale orders reproduce the reference (distinct scales per block): the row
//               passes when the default layout does.
// Timed (not --small): Qwen3-8B projections, the FP8 GEMV beside the bf16 one at m = 1..16 (W
// rotated out of L2 as in op_check_linear.cc; GB/s of the FP8 bytes), the FP8 GEMM beside the
// bf16 cuda::Linear at m = 64, 256, 2048 (TFLOP/s against the bf16 ceiling: FP8's dense peak is
// twice it).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/fp8_linear.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/linear.h"
#include "op_check_util.h"

namespace tandem::opcheck {
namespace {

constexpr double kTol = 1e-2;
constexpr double kL2RotateBytes = 256e6;
using Layout = cuda::Fp8GemmLayout;
using ActScales = Layout::ActScales;

// A quantized weight on host and device.
struct QWeight {
  int n = 0, k = 0;
  bool block = false;
  std::vector<uint8_t> codes;
  std::vector<float> scales;    // [n] or [nb, kb] (unpadded: the host reference's)
  std::vector<float> dequant;   // [n, k]
  std::vector<DevBuf<uint8_t>> d_codes;  // identical copies (L2 rotation)
  DevBuf<float> d_scales, d_unpadded;    // the device layout (block: [nb, kb4]); block [nb, kb]
  DevBuf<float> d_vec_t;                 // block scales repeated per row, [kb, n] (1 x 128 mode)

  // scales: 0 the device layout, 1 block scales unpadded [nb, kb], 2 per row [kb, n].
  cuda::Fp8Weight Weight(int copy, int scales = 0) const {
    cuda::Fp8Weight w;
    w.q = d_codes[copy].get();
    const DevBuf<float>* s[] = {&d_scales, &d_unpadded, &d_vec_t};
    w.scale = s[scales]->get();
    w.scaling = block ? cuda::Fp8Scaling::kBlock128 : cuda::Fp8Scaling::kPerChannel;
    return w;
  }
};

// w [n, k] -> e4m3 codes with one scale per 128 x 128 block: amax / 448 (1 for a zero block).
void QuantizeBlocks(const std::vector<float>& w, int n, int k, std::vector<uint8_t>* codes,
                    std::vector<float>* scales) {
  const int nb = (n + 127) / 128, kb = (k + 127) / 128;
  scales->assign(static_cast<size_t>(nb) * kb, 1.0f);
  codes->resize(w.size());
  for (int bi = 0; bi < nb; ++bi) {
    for (int bj = 0; bj < kb; ++bj) {
      float amax = 0;
      for (int r = bi * 128; r < std::min(n, bi * 128 + 128); ++r) {
        for (int c = bj * 128; c < std::min(k, bj * 128 + 128); ++c) amax = std::max(amax, std::fabs(w[static_cast<size_t>(r) * k + c]));
      }
      const float s = amax > 0 ? amax / cpu::kFp8E4M3Max : 1.0f;
      (*scales)[static_cast<size_t>(bi) * kb + bj] = s;
      for (int r = bi * 128; r < std::min(n, bi * 128 + 128); ++r) {
        for (int c = bj * 128; c < std::min(k, bj * 128 + 128); ++c) {
          const size_t i = static_cast<size_t>(r) * k + c;
          (*codes)[i] = cpu::FloatToFp8E4M3(w[i] / s);
        }
      }
    }
  }
}

QWeight MakeWeight(int n, int k, bool block, int copies, std::mt19937& rng) {
  QWeight q;
  q.n = n;
  q.k = k;
  q.block = block;
  std::vector<float> w(static_cast<size_t>(n) * k);
  // Rows of different magnitudes, so that per-row and per-block scales differ.
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), mag(0.01f, 0.1f);
  for (int r = 0; r < n; ++r) {
    const float m = mag(rng);
    for (int c = 0; c < k; ++c) w[static_cast<size_t>(r) * k + c] = m * u(rng) * (1.0f + (c / 128) % 3);
  }
  q.codes.resize(w.size());
  if (block) {
    QuantizeBlocks(w, n, k, &q.codes, &q.scales);
  } else {
    q.scales.resize(n);
    cpu::QuantizeFp8E4M3PerRow(w.data(), n, k, q.codes.data(), q.scales.data());
  }
  q.dequant.resize(w.size());
  cpu::DequantizeFp8E4M3(q.codes.data(), n, k, q.scales.data(), block ? 128 : 1, block ? 128 : k,
                         q.dequant.data());
  for (int c = 0; c < copies; ++c) {
    q.d_codes.emplace_back(q.codes.size());
    q.d_codes.back().Upload(q.codes);
  }
  if (!block) {
    q.d_scales = DevBuf<float>(q.scales.size());
    q.d_scales.Upload(q.scales);
  } else {
    const int nb = (n + 127) / 128, kb = (k + 127) / 128, kb4 = cuda::Fp8BlockScaleCols(k);
    std::vector<float> padded(static_cast<size_t>(nb) * kb4, 1.0f), vt(static_cast<size_t>(kb) * n);
    for (int i = 0; i < nb; ++i) {
      for (int j = 0; j < kb; ++j) padded[static_cast<size_t>(i) * kb4 + j] = q.scales[static_cast<size_t>(i) * kb + j];
    }
    for (int r = 0; r < n; ++r) {
      for (int j = 0; j < kb; ++j) vt[static_cast<size_t>(j) * n + r] = q.scales[static_cast<size_t>(r / 128) * kb + j];
    }
    q.d_scales = DevBuf<float>(padded.size());
    q.d_scales.Upload(padded);
    q.d_unpadded = DevBuf<float>(q.scales.size());
    q.d_unpadded.Upload(q.scales);
    q.d_vec_t = DevBuf<float>(vt.size());
    q.d_vec_t.Upload(vt);
  }
  return q;
}

// The host twin of the activation quantizer: x rows -> codes and scales (row-major [m, groups]).
void QuantizeActsHost(const std::vector<float>& x, int m, int k, bool groups, std::vector<uint8_t>* codes,
                      std::vector<float>* scales) {
  const int g = groups ? 128 : k, ng = (k + g - 1) / g;
  codes->resize(static_cast<size_t>(m) * k);
  scales->resize(static_cast<size_t>(m) * ng);
  for (int r = 0; r < m; ++r) {
    for (int gi = 0; gi < ng; ++gi) {
      float amax = 0;
      for (int c = gi * g; c < std::min(k, gi * g + g); ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r) * k + c]));
      const float s = std::max(amax, 1e-12f) / cpu::kFp8E4M3Max;
      const float inv = 1.0f / s;
      (*scales)[static_cast<size_t>(r) * ng + gi] = s;
      for (int c = gi * g; c < std::min(k, gi * g + g); ++c) {
        (*codes)[static_cast<size_t>(r) * k + c] = cpu::FloatToFp8E4M3(x[static_cast<size_t>(r) * k + c] * inv);
      }
    }
  }
}

std::vector<float> HostLinear(const std::vector<float>& x, int m, int k, const std::vector<float>& w, int n) {
  std::vector<float> y(static_cast<size_t>(m) * n);
  cpu::Linear(x.data(), m, k, w.data(), n, nullptr, y.data());
  return y;
}

struct Io {
  DevBuf<bf16> x, y;
  std::vector<float> xf;
  DevBuf<char> scratch;
  Io(int m, int k, int n) {
    x = DevBuf<bf16>(static_cast<size_t>(m) * k);
    FillUniform(x.get(), x.size(), NextSeed(), -2.0f, 2.0f);
    xf = DownloadFloat(x);
    y = DevBuf<bf16>(static_cast<size_t>(m) * n);
    scratch = DevBuf<char>(cuda::Fp8LinearScratchBytes(m, k));
  }
  cuda::Fp8LinearArgs Args(const cuda::Fp8Weight& w, int m, int n, int k) const {
    cuda::Fp8LinearArgs a;
    a.x = x.get();
    a.ldx = k;
    a.w = w;
    a.y = y.get();
    a.ldy = n;
    a.m = m;
    a.n = n;
    a.k = k;
    return a;
  }
};

std::string Text(const char* label, int m, int n, int k, bool block, const std::string& path) {
  char t[160];
  std::snprintf(t, sizeof(t), "%s m %d n %d k %d %s %s", label, m, n, k, block ? "blk128" : "chan", path.c_str());
  return t;
}

void CheckQuantizer(int m, int k, bool groups) {
  Io io(m, k, 16);
  std::vector<uint8_t> hc;
  std::vector<float> hs;
  QuantizeActsHost(io.xf, m, k, groups, &hc, &hs);
  const int ng = groups ? (k + 127) / 128 : 1;
  DevBuf<uint8_t> codes(static_cast<size_t>(m) * k);
  DevBuf<float> scales(static_cast<size_t>(ng) * m);
  OC_OK(cuda::QuantizeFp8Activations(io.x.get(), k, m, k, groups, Layout{ActScales::kRowMajor}, codes.get(),
                                     scales.get(), nullptr));
  const auto dc = codes.Download();
  const auto ds = scales.Download();
  long bad_codes = 0, bad_scales = 0;
  for (size_t i = 0; i < hc.size(); ++i) bad_codes += dc[i] != hc[i];
  for (size_t i = 0; i < hs.size(); ++i) bad_scales += std::memcmp(&ds[i], &hs[i], 4) != 0;
  Row row{"fp8_quant", Text(groups ? "groups" : "tokens", m, 0, k, false, "")};
  row.pass = bad_codes == 0 && bad_scales == 0;
  row.note = std::to_string(bad_codes) + " codes, " + std::to_string(bad_scales) + " scales differ";
  Record(row);
}

void CheckDequant(int n, int k, bool block, std::mt19937& rng) {
  const QWeight q = MakeWeight(n, k, block, 1, rng);
  DevBuf<bf16> out(static_cast<size_t>(n) * k);
  OC_OK(cuda::DequantizeFp8Weight(q.Weight(0), n, k, out.get(), nullptr));
  const auto got = DownloadFloat(out);
  long bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &q.dequant[i], 4);
    // Round the host's fp32 product to bf16 (nearest even), as the kernel does once.
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float r;
    std::memcpy(&r, &u, 4);
    bad += got[i] != r;
  }
  Row row{"fp8_dequant", Text("w", 0, n, k, block, "")};
  row.pass = bad == 0;
  row.note = std::to_string(bad) + " elements differ";
  Record(row);
}

Row CompareY(const char* op, const std::string& text, const Io& io, int m, int n, const std::vector<float>& ref) {
  Row row{op, text};
  const auto got = DownloadFloat(io.y.get(), static_cast<size_t>(m) * n);
  row.err = Compare(got, ref);
  row.tol = kTol;
  row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol;
  return row;
}

// The GEMV at every k split and through the dispatch.
void CheckGemv(int m, int n, int k, bool block, std::mt19937& rng) {
  const QWeight q = MakeWeight(n, k, block, 1, rng);
  Io io(m, k, n);
  const auto ref = HostLinear(io.xf, m, k, q.dequant, n);
  for (int ks = 0; ks <= 8; ks = ks == 0 ? 1 : ks * 2) {
    io.y.Poison();
    OC_OK(cuda::Fp8LinearGemv(io.Args(q.Weight(0), m, n, k), ks, nullptr));
    OC_CUDA(cudaDeviceSynchronize());
    Record(CompareY("fp8_gemv", Text("gemv", m, n, k, block, "ks" + std::to_string(ks)), io, m, n, ref));
  }
}

// The reference of the W8A8 GEMM: x quantized as the kernel does, times the dequantized weight.
std::vector<float> GemmReference(const Io& io, int m, int k, const QWeight& q) {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  QuantizeActsHost(io.xf, m, k, q.block, &codes, &scales);
  std::vector<float> xq(codes.size());
  cpu::DequantizeFp8E4M3(codes.data(), m, k, scales.data(), 1, q.block ? 128 : k, xq.data());
  return HostLinear(xq, m, k, q.dequant, q.n);
}

cuda::Fp8Gemm* Gemm() {
  static DevBuf<char> workspace(size_t{32} << 20);
  static std::unique_ptr<cuda::Fp8Gemm> gemm = [] {
    auto g = cuda::Fp8Gemm::Create(workspace.get(), workspace.size());
    if (!g.ok()) {
      std::printf("fp8: no FP8 GEMM here: %s\n", g.status().ToString().c_str());
      // On sm_90 (not the emulator) the GEMM must exist: a failing row, not silently skipped rows.
      int device = 0;
      cudaDeviceProp prop{};
      if (cudaGetDevice(&device) == cudaSuccess && cudaGetDeviceProperties(&prop, device) == cudaSuccess &&
          prop.major == 9 && g.status().code() != StatusCode::kUnimplemented) {
        Row row{"fp8_gemm", "Fp8Gemm::Create"};
        row.note = g.status().ToString();
        Record(row);
      }
    }
    return g.ok() ? std::move(*g) : nullptr;
  }();
  return gemm.get();
}

// Bias, fp32 output and a row stride past k through the GEMV (m <= 16) or the GEMM.
void CheckBiasF32Strided(int m, int n, int k, bool block, bool gemm, std::mt19937& rng) {
  if (gemm && Gemm() == nullptr) return;
  const QWeight q = MakeWeight(n, k, block, 1, rng);
  const int64_t ldx = k + 16, ldy = n + 8;
  DevBuf<bf16> x(static_cast<size_t>(m) * ldx), bias(n);
  FillUniform(x.get(), x.size(), NextSeed(), -2.0f, 2.0f);
  FillUniform(bias.get(), bias.size(), NextSeed(), -1.0f, 1.0f);
  DevBuf<float> y(static_cast<size_t>(m) * ldy);
  DevBuf<char> scratch(cuda::Fp8LinearScratchBytes(m, k));
  const auto xf_all = DownloadFloat(x), bf = DownloadFloat(bias);
  std::vector<float> xf(static_cast<size_t>(m) * k);
  for (int r = 0; r < m; ++r) std::copy_n(xf_all.begin() + r * ldx, k, xf.begin() + static_cast<size_t>(r) * k);
  std::vector<float> xr = xf;
  if (gemm) {  // the GEMM's x is quantized as the kernel does
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    QuantizeActsHost(xf, m, k, block, &codes, &scales);
    cpu::DequantizeFp8E4M3(codes.data(), m, k, scales.data(), 1, block ? 128 : k, xr.data());
  }
  std::vector<float> ref(static_cast<size_t>(m) * n);
  cpu::Linear(xr.data(), m, k, q.dequant.data(), n, bf.data(), ref.data());
  cuda::Fp8LinearArgs a;
  a.x = x.get();
  a.ldx = ldx;
  a.w = q.Weight(0);
  a.bias = bias.get();
  a.y = y.get();
  a.ldy = ldy;
  a.out_dtype = cuda::OutDtype::kFloat32;
  a.m = m;
  a.n = n;
  a.k = k;
  y.Poison();
  OC_OK(gemm ? Gemm()->Run(a, scratch.get(), scratch.size(), nullptr) : cuda::Fp8LinearGemv(a, 0, nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  const auto got_all = y.Download();
  std::vector<float> got(ref.size());
  long pad_written = 0;
  for (int r = 0; r < m; ++r) {
    std::copy_n(got_all.begin() + r * ldy, n, got.begin() + static_cast<size_t>(r) * n);
    for (int64_t j = n; j < ldy; ++j) pad_written += !std::isnan(got_all[r * ldy + j]);
  }
  Row row{"fp8_bias_f32", Text(gemm ? "gemm" : "gemv", m, n, k, block, "+bias f32 strided")};
  row.err = Compare(got, ref);
  row.tol = kTol;
  row.pass = row.err.non_finite == 0 && row.err.rel <= row.tol && pad_written == 0;
  if (pad_written > 0) row.note = std::to_string(pad_written) + " padding elements written";
  Record(row);
}

void CheckGemm(int m, int n, int k, bool block, std::mt19937& rng) {
  if (Gemm() == nullptr) return;
  const QWeight q = MakeWeight(n, k, block, 1, rng);
  Io io(m, k, n);
  const auto ref = GemmReference(io, m, k, q);
  const auto ref_bf16_x = HostLinear(io.xf, m, k, q.dequant, n);
  io.y.Poison();
  const Status st = Gemm()->Run(io.Args(q.Weight(0), m, n, k), io.scratch.get(), io.scratch.size(), nullptr);
  OC_CUDA(cudaDeviceSynchronize());
  Row row = CompareY("fp8_gemm", Text("gemm", m, n, k, block, "cublasLt"), io, m, n, ref);
  if (!st.ok()) {
    row.pass = false;
    row.note = st.ToString();
    Record(row);
    return;
  }
  const auto got = DownloadFloat(io.y.get(), static_cast<size_t>(m) * n);
  char note[96];
  std::snprintf(note, sizeof(note), "vs unquantized x: rel %.2e", Compare(got, ref_bf16_x).rel);
  row.note = note;
  Record(row);
}

// cuda::Fp8Linear with block weights and m not a multiple of kFp8GemmRowMultiple: the GEMM rows
// against the quantized-x reference, the tail rows (the GEMV) against the unquantized one.
void CheckLinearSplit(int m, int n, int k, std::mt19937& rng) {
  if (Gemm() == nullptr) return;
  const QWeight q = MakeWeight(n, k, true, 1, rng);
  Io io(m, k, n);
  const auto ref_q = GemmReference(io, m, k, q);
  const auto ref_x = HostLinear(io.xf, m, k, q.dequant, n);
  const int head = m / cuda::kFp8GemmRowMultiple * cuda::kFp8GemmRowMultiple;
  std::vector<float> ref(ref_q.begin(), ref_q.begin() + static_cast<size_t>(head) * n);
  ref.insert(ref.end(), ref_x.begin() + static_cast<size_t>(head) * n, ref_x.end());
  io.y.Poison();
  OC_OK(cuda::Fp8Linear(Gemm(), io.Args(q.Weight(0), m, n, k), io.scratch.get(), io.scratch.size(), nullptr));
  OC_CUDA(cudaDeviceSynchronize());
  Row row = CompareY("fp8_linear", Text("split", m, n, k, true, std::to_string(head) + " gemm + " +
                                                                       std::to_string(m - head) + " gemv"),
                     io, m, n, ref);
  Record(row);
}

// Which scale layouts cuBLASLt takes and reads as the reference does (block weights): each
// activation-scale layout against each weight-scale form (128 x 128 blocks with rows padded to 4 as
// the device stores them, or unpadded, or 1 x 128 per row as [kb, n]). Measured on the H200
// (2026-12-03): activation scales [kb, m]; block rows unpadded read wrong when kb % 4 != 0.
// Passes when the default layout matches.
void CheckLayouts(int m, int n, int k, std::mt19937& rng) {
  if (Gemm() == nullptr) return;
  const QWeight q = MakeWeight(n, k, true, 1, rng);
  Io io(m, k, n);
  const auto ref = GemmReference(io, m, k, q);
  const Layout def;
  bool default_ok = false;
  std::string note = "matching:";
  std::string unsupported;
  const char* act_names[] = {"act[m,kb]", "act[kb,m]", "act[kb,m4]"};
  const char* w_names[] = {"blk[nb,kb4]", "blk[nb,kb]", "vec[kb,n]"};
  for (int a = 0; a < 3; ++a) {
    for (int wv = 0; wv < 3; ++wv) {
      Layout l;
      l.act_scales = static_cast<ActScales>(a);
      l.weight_scales = wv < 2 ? Layout::WeightScales::kBlk128x128 : Layout::WeightScales::kVec128;
      io.y.Poison();
      const Status st = Gemm()->Run(io.Args(q.Weight(0, wv), m, n, k), io.scratch.get(), io.scratch.size(),
                                    nullptr, l);
      OC_CUDA(cudaDeviceSynchronize());
      const std::string name = std::string(act_names[a]) + "+" + w_names[wv];
      if (!st.ok()) {
        unsupported += " " + name;
        continue;
      }
      const Row r = CompareY("x", "x", io, m, n, ref);
      char e[32];
      std::snprintf(e, sizeof(e), "(%.1e)", r.err.rel);
      note += " " + name + (r.pass ? "" : "=wrong") + e;
      if (r.pass && l.act_scales == def.act_scales && wv == 0) {
        default_ok = true;
      }
    }
  }
  Row row{"fp8_layout", Text("layouts", m, n, k, true, "")};
  row.pass = default_ok;
  row.note = note + "; not supported:" + unsupported;
  Record(row);
}

void TimedShape(const char* label, int n, int k, const std::vector<int>& ms, std::mt19937& rng) {
  const int copies = std::clamp(static_cast<int>(std::ceil(kL2RotateBytes / (1.0 * n * k))), 1, 8);
  for (bool block : {false, true}) {
    const QWeight q = MakeWeight(n, k, block, copies, rng);
    const int max_m = *std::max_element(ms.begin(), ms.end());
    Io io(max_m, k, n);
    // The bf16 weight beside it (the dequantized one), rotated the same way.
    std::vector<DevBuf<bf16>> wb;
    for (int c = 0; c < std::clamp(copies / 2, 1, 8); ++c) {
      wb.emplace_back(static_cast<size_t>(n) * k);
      UploadBf16(wb.back().get(), q.dequant);
    }
    // The bf16 Linear beside it on the same x and y (W set per call from the rotated copies).
    auto bf16_args = [&](int m) {
      cuda::LinearArgs b;
      b.x = io.x.get();
      b.ldx = k;
      b.y = io.y.get();
      b.ldy = n;
      b.m = m;
      b.n = n;
      b.k = k;
      return b;
    };
    for (int m : ms) {
      int call = 0;
      if (m <= cuda::kGemvMaxRows) {
        const auto ref = HostLinear(std::vector<float>(io.xf.begin(), io.xf.begin() + static_cast<size_t>(m) * k), m, k,
                                    q.dequant, n);
        OC_OK(cuda::Fp8LinearGemv(io.Args(q.Weight(0), m, n, k), 0, nullptr));
        OC_CUDA(cudaDeviceSynchronize());
        Row row = CompareY("fp8_gemv", Text(label, m, n, k, block, "gemv"), io, m, n, ref);
        // Timed inside a CUDA graph (as the engine's decode steps run it), W rotated out of L2.
        row.time_us = TimeUsGraph([&](cudaStream_t st) {
          OC_OK(cuda::Fp8LinearGemv(io.Args(q.Weight(call++ % copies), m, n, k), 0, st));
        });
        row.bytes = 1.0 * n * k + 2.0 * m * k + 2.0 * m * n;
        cuda::LinearArgs b = bf16_args(m);
        const double bf16_us = TimeUsGraph([&](cudaStream_t st) {
          b.w = wb[call++ % wb.size()].get();
          OC_OK(cuda::LinearGemv(b, 0, st));
        });
        char note[96];
        std::snprintf(note, sizeof(note), "graph; bf16 gemv %.1f us (x%.2f)", bf16_us, bf16_us / row.time_us);
        row.note = note;
        Record(row);
      } else if (Gemm() != nullptr) {
        const auto xm = std::vector<float>(io.xf.begin(), io.xf.begin() + static_cast<size_t>(std::min(m, 16)) * k);
        const Status first = Gemm()->Run(io.Args(q.Weight(0), m, n, k), io.scratch.get(), io.scratch.size(), nullptr);
        OC_CUDA(cudaDeviceSynchronize());
        if (!first.ok()) {
          Row row{"fp8_gemm", Text(label, m, n, k, block, "cublasLt")};
          row.note = first.ToString();
          Record(row);
          continue;
        }
        // Checked on the first 16 rows (the reference is on the host).
        std::vector<uint8_t> codes;
        std::vector<float> scales;
        QuantizeActsHost(xm, std::min(m, 16), k, block, &codes, &scales);
        std::vector<float> xq(codes.size());
        cpu::DequantizeFp8E4M3(codes.data(), std::min(m, 16), k, scales.data(), 1, block ? 128 : k, xq.data());
        Row row = CompareY("fp8_gemm", Text(label, m, n, k, block, "cublasLt"), io, std::min(m, 16), n,
                           HostLinear(xq, std::min(m, 16), k, q.dequant, n));
        row.time_us = TimeUs([&] {
          OC_OK(Gemm()->Run(io.Args(q.Weight(call++ % copies), m, n, k), io.scratch.get(), io.scratch.size(), nullptr));
        });
        row.flops = 2.0 * m * n * k;
        cuda::LinearArgs b = bf16_args(m);
        static Result<cuda::CublasHandle> handle = cuda::CublasHandle::Create();
        OC_OK(handle.status());
        const double bf16_us = TimeUs([&] {
          b.w = wb[call++ % wb.size()].get();
          OC_OK(cuda::LinearCublas(*handle, b, nullptr));
        });
        char note[96];
        std::snprintf(note, sizeof(note), "bf16 cublas %.1f us (x%.2f)", bf16_us, bf16_us / row.time_us);
        row.note = note;
        Record(row);
      }
    }
  }
}

}  // namespace

void CheckFp8() {
  std::mt19937 rng(static_cast<uint32_t>(NextSeed()));
  CheckQuantizer(5, 264, true);
  CheckQuantizer(3, 1000, false);
  CheckDequant(200, 272, true, rng);
  CheckDequant(40, 96, false, rng);
  // The GEMV: n past a tile, k with a partial step (k % 64 != 0) and partial blocks, m 1..16.
  for (int m : {1, 3, 9, 16}) {
    CheckGemv(m, 200, 336, false, rng);
    CheckGemv(m, 272, 656, true, rng);  // 6 block columns, padded to 8
  }
  for (bool block : {false, true}) {
    CheckBiasF32Strided(5, 200, 656, block, false, rng);
    CheckBiasF32Strided(40, 256, 512, block, true, rng);
  }
  CheckGemm(37, 384, 640, false, rng);
  // Row counts cuBLASLt's block-scaled GEMM takes (Gemm()->Run has no split): multiples of 4 (on
  // the H200 m = 37 has no algorithm, 2026-12-03); Fp8Linear sends the rest to the GEMV.
  for (int m : {32, 36, 40, 48}) CheckGemm(m, 384, 640, true, rng);
  CheckLinearSplit(37, 384, 640, rng);
  CheckLinearSplit(79, 256, 512, rng);
  CheckLayouts(64, 384, 640, rng);
  CheckLayouts(256, 256, 512, rng);
  CheckFp8SiluQuant();
  if (Small()) return;
  TimedShape("qkv", 6144, 4096, {1, 4, 8, 16, 64, 256, 2048}, rng);
  TimedShape("o", 4096, 4096, {1, 8, 64, 256, 2048}, rng);
  TimedShape("gate_up", 24576, 4096, {1, 8, 64, 256, 2048}, rng);
  TimedShape("down", 4096, 12288, {1, 8, 64, 256, 2048}, rng);
}

}  // namespace tandem::opcheck
