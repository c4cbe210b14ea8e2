// The GPU and kernel-family report of a CUDA worker (device_report.h).
#include "kernels/cuda/device_report.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/linear.h"
#include "kernels/cuda/paged_attention.h"

#ifndef TANDEM_CUDA_ARCHS_STR
#define TANDEM_CUDA_ARCHS_STR "unknown"
#endif

namespace tandem::cuda {
namespace {

double KiB(size_t b) { return static_cast<double>(b) / 1024.0; }

// How a prefill kernel's shared memory compares with the device's per-block limit.
std::string PrefillTile(PrefillKernel k, const char* what, int head_dim, const DeviceLimits& d) {
  const size_t bytes = detail::PagedPrefillSmemBytes(k, head_dim);
  const bool fits = bytes > 0 && bytes <= d.smem_per_block_optin;
  return fmt::format("{} ({:.0f} KiB shared memory{})", what, KiB(bytes),
                     fits ? "" : fmt::format(", over this GPU's {:.0f} KiB: not used",
                                             KiB(d.smem_per_block_optin)));
}

}  // namespace

const char* BuiltCudaArchs() { return TANDEM_CUDA_ARCHS_STR; }

std::string ArchitectureName(int major, int minor) {
  if (major == 8) return minor == 9 ? "Ada" : "Ampere";
  if (major == 9) return "Hopper";
  if (major >= 10 && major <= 12) return "Blackwell";
  return "unknown";
}

std::string BandwidthClass(const DeviceLimits& d) {
  const char* kind = d.mem_bus_width_bits >= 2048 ? "HBM" : "GDDR";
  const double peak = d.PeakBandwidthBytesPerSecond();
  if (peak <= 0) return fmt::format("{} {}-bit", kind, d.mem_bus_width_bits);
  return fmt::format("{} {}-bit, {:.2f} TB/s peak", kind, d.mem_bus_width_bits, peak / 1e12);
}

Result<std::string> DescribeDevice(int device) {
  TANDEM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  DeviceLimits d;
  TANDEM_CUDA_RETURN_IF_ERROR(QueryDeviceLimits(device, &d));
  cudaDeviceProp prop{};
  TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  const char* name = prop.name;
  size_t free = 0, total = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
  int binary = 0, ptx = 0;
  const cudaError_t probe = ProbeLoadedCode(&binary, &ptx);
  if (probe == cudaErrorNoKernelImageForDevice || probe == cudaErrorInvalidDeviceFunction ||
      probe == cudaErrorUnsupportedPtxVersion) {
    cudaGetLastError();
    return Err(StatusCode::kFailedPrecondition,
               "cuda:{} ({}, compute capability {}.{}) cannot run this build's CUDA code, which "
               "holds {} ({}): rebuild with CMAKE_FLAGS=-DTANDEM_CUDA_ARCHS={}{}-real (or its "
               "default, every supported GPU)",
               device, name, d.cc_major, d.cc_minor, BuiltCudaArchs(), cudaGetErrorString(probe),
               d.cc_major, d.cc_minor);
  }
  TANDEM_CUDA_RETURN_IF_ERROR(probe);
  const std::string code =
      binary == ptx ? fmt::format("sm_{} SASS", binary)
                    : fmt::format("sm_{} compiled by the driver from compute_{} PTX", binary, ptx);
  const size_t planned = CurrentDeviceLimits().smem_per_block_optin;
  const std::string cap =
      planned < d.smem_per_block_optin
          ? fmt::format(" (planned as {:.0f} KiB: TANDEM_CUDA_SMEM_LIMIT_KIB)", KiB(planned))
          : std::string();
  return fmt::format(
      "cuda:{}: {}, compute capability {}.{} ({}), {} SMs, {:.1f} GiB ({:.1f} free), {}, L2 "
      "{:.0f} MiB, shared memory {:.0f} KiB per block{} / {:.0f} KiB per SM; code: {} (built "
      "for {})",
      device, name, d.cc_major, d.cc_minor, ArchitectureName(d.cc_major, d.cc_minor), d.sm_count,
      static_cast<double>(total) / (1ull << 30), static_cast<double>(free) / (1ull << 30),
      BandwidthClass(d), static_cast<double>(d.l2_bytes) / (1 << 20), KiB(d.smem_per_block_optin),
      cap, KiB(d.smem_per_sm), code, BuiltCudaArchs());
}

std::vector<std::string> DescribeKernels(const DeviceLimits& d, const KernelShapes& s) {
  std::vector<std::string> out;
  const int gemv_m = GemvMaxM();
  out.push_back(fmt::format(
      "linear (qkv, o, gate_up, down, lm_head): cuBLAS cublasGemmEx bf16 x bf16, fp32 accumulate "
      "(tensor cores){}",
      gemv_m > 0 ? fmt::format("; m <= {} rows: tandem's bf16 GEMV (weights streamed once, "
                               "16-byte loads)", gemv_m)
                 : std::string("; GEMV off (TANDEM_GEMV)")));
  PagedPrefillArgs probe;
  probe.head_dim = s.head_dim;
  probe.num_heads = s.num_heads;
  probe.num_kv_heads = s.num_kv_heads;
  probe.num_seqs = 1;
  probe.max_query_len = 1 << 20;  // many CTAs: the large-prefill choice
  const PrefillKernel big = detail::ChoosePagedPrefillKernel(probe, d);
  probe.max_query_len = 1;
  const PrefillKernel small = detail::ChoosePagedPrefillKernel(probe, d);
  auto name = [&](PrefillKernel k) {
    switch (k) {
      case PrefillKernel::kMma128:
        return PrefillTile(k, "mma.sync m16n8k16, 128-query tiles", s.head_dim, d);
      case PrefillKernel::kMma64:
        return PrefillTile(k, "mma.sync m16n8k16, 64-query tiles", s.head_dim, d);
      case PrefillKernel::kWmma: return PrefillTile(k, "WMMA 16x16x16, 64-query tiles", s.head_dim, d);
      case PrefillKernel::kWgmma:
        return PrefillTile(k, "FlashAttention-3 style wgmma m64n128k16 (sm_90a), 128-query x 128-key tiles",
                           s.head_dim, d);
      default: return std::string("?");
    }
  };
  out.push_back(fmt::format(
      "paged_prefill (head_dim {}): online softmax in registers; "
      "large batches: {}; under two waves of CTAs: {}",
      s.head_dim, name(big), name(small)));
  const DecodeSplitPolicy policy = PagedDecodeResolvePolicy(DecodeSplitPolicy::kAuto);
  PagedDecodeArgs decode;
  decode.head_dim = s.head_dim;
  decode.num_heads = s.num_heads;
  decode.num_kv_heads = s.num_kv_heads;
  const int group = s.num_kv_heads > 0 ? s.num_heads / s.num_kv_heads : 0;
  if (detail::ChoosePagedDecodeKernel(decode, d) != DecodeKernel::kSimt) {
    out.push_back(fmt::format(
        "paged_decode: split-KV flash-decoding on the tensor cores (mma.sync m16n8k16 bf16, the "
        "{} query heads of a KV head as tile rows), K/V through {} cp.async stages a warp, {} "
        "CTAs per SM; splits fill the {} SMs, merged by the last CTA",
        group, detail::PagedDecodeMmaStages(s.head_dim, d),
        detail::PagedDecodeMmaCtasPerSm(s.head_dim, d), d.sm_count));
  } else {
    out.push_back(fmt::format(
        "paged_decode: split-KV flash-decoding on CUDA cores, one CTA per (split, KV head, "
        "sequence) for its {} query heads, 16-byte K/V loads; splits: {}",
        group,
        policy == DecodeSplitPolicy::kFill
            ? fmt::format("fill the {} SMs, merged by the last CTA", d.sm_count)
            : std::string("by context length (64-key chunks), merge kernel")));
  }
  out.push_back("embedding, rms_norm (+ residual add), qk_norm + RoPE, reshape_and_cache, "
                "silu_mul: tandem's elementwise kernels (bf16, fp32 math)");
  out.push_back("sampling: tandem's GPU kernels (argmax + log-sum-exp, top-k, penalties, "
                "temperature / min-p / top-k / top-p sampling)");
  const bool hopper_prefill = big == PrefillKernel::kWgmma || small == PrefillKernel::kWgmma;
  out.push_back(fmt::format(
      "Hopper-only paths (wgmma, sm_90a): {}; every other op runs the sm_80 instruction set on "
      "compute capability {}.{}",
      hopper_prefill ? "the prefill attention"
                     : (detail::PagedPrefillWgmmaBuilt() ? "none on this GPU"
                                                         : "none (this build has no sm_90a code)"),
      d.cc_major, d.cc_minor));
  return out;
}

}  // namespace tandem::cuda
