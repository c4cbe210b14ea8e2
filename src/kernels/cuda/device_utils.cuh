// Device helpers shared by the CUDA ops (included only by .cu files): bf16 <-> fp32 vectors of 8
// (one 16-byte access), warp and block reductions (sum, max, and the (value, index) best pair of
// the sampling ops).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <cstdint>

// Kernel launch and dynamic shared memory through macros, so that dev/kernels/emu can run the
// same .cu files on the CPU (it defines both before this header).
#ifndef TANDEM_LAUNCH
#define TANDEM_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif
#ifndef TANDEM_DYNAMIC_SHARED
#define TANDEM_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif
// The same launch with programmatic stream serialization when `pdl` (CUDA programming guide,
// "Programmatic Dependent Launch"): the kernel may begin once every CTA of the previous kernel in
// the stream has called TriggerDependents (or exited), so it must call GridDependencyWait before
// it touches anything that kernel writes. sm_90+ only: callers pass pdl = false elsewhere.
#ifndef TANDEM_LAUNCH_PDL
#define TANDEM_LAUNCH_PDL(kernel, grid, block, smem, stream, pdl, ...)        \
  do {                                                                       \
    cudaLaunchConfig_t tandem_cfg{};                                         \
    tandem_cfg.gridDim = grid;                                               \
    tandem_cfg.blockDim = block;                                             \
    tandem_cfg.dynamicSmemBytes = smem;                                      \
    tandem_cfg.stream = stream;                                              \
    cudaLaunchAttribute tandem_attr[1];                                      \
    tandem_attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;  \
    tandem_attr[0].val.programmaticStreamSerializationAllowed = 1;           \
    tandem_cfg.attrs = tandem_attr;                                          \
    tandem_cfg.numAttrs = (pdl) ? 1 : 0;                                     \
    (void)cudaLaunchKernelEx(&tandem_cfg, kernel, __VA_ARGS__);              \
  } while (0)
#endif

namespace tandem::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;

// Programmatic dependent launch (sm_90+; no-ops before, and in the CPU emulator, which runs one
// kernel after another): GridDependencyWait blocks until the grids this one depends on have
// finished and their writes are visible; TriggerDependents lets a dependent grid launched with
// TANDEM_LAUNCH_PDL begin before this one ends; PrefetchL2 asks for the 128-byte line at p in L2
// (a hint: no register written, no fault).
#if defined(TANDEM_CUDA_EMU)
inline void GridDependencyWait() {}
inline void TriggerDependents() {}
inline void PrefetchL2(const void*) {}
#else
__device__ inline void GridDependencyWait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ inline void TriggerDependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ inline void PrefetchL2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
#endif

// Thread-block clusters (sm_90+; PTX ISA "barrier.cluster", "mapa", "ld.shared::cluster"):
// ClusterSync is barrier.cluster.arrive.release + wait.acquire (every thread of every CTA of the
// cluster must call it, the same number of times); ClusterMapShared gives the shared::cluster
// address of the variable at `p` (this CTA's shared memory) in the CTA of cluster rank `rank`;
// LdCluster / LdCluster4 read 4 / 16 bytes there. Before sm_90 they trap; the CPU emulator has
// no clusters (its stubs abort, nothing launches them there).
#if defined(TANDEM_CUDA_EMU)
inline void ClusterSync() { std::abort(); }
inline uint32_t ClusterMapShared(const void*, unsigned) { std::abort(); }
inline float LdCluster(uint32_t) { std::abort(); }
inline float4 LdCluster4(uint32_t) { std::abort(); }
#else
__device__ inline void ClusterSync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
  __trap();
#endif
}
__device__ inline uint32_t ClusterMapShared(const void* p, unsigned rank) {
  uint32_t remote = 0;
#if __CUDA_ARCH__ >= 900
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
#else
  __trap();
#endif
  return remote;
}
__device__ inline float LdCluster(uint32_t addr) {
  float v = 0.0f;
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
#endif
  return v;
}
__device__ inline float4 LdCluster4(uint32_t addr) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if __CUDA_ARCH__ >= 900
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr) : "memory");
#endif
  return v;
}
#endif

// True when p is 16-byte aligned (uint4 access).
__host__ __device__ inline bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// 16 bytes from global memory (p 16-byte aligned; the emulator checks). LoadStream: read-only, not
// kept in L1, L2 fetching the 256 bytes around the address (weights streamed once by the GEMVs);
// LoadCached: through L1 (__ldg: activations every warp of an SM reads).
#ifdef TANDEM_CUDA_EMU
__device__ inline uint4 LoadStream(const void* p) {
  if (!Aligned16(p)) std::abort();
  return *reinterpret_cast<const uint4*>(p);
}
__device__ inline uint4 LoadCached(const void* p) {
  if (!Aligned16(p)) std::abort();
  return *reinterpret_cast<const uint4*>(p);
}
#else
__device__ inline uint4 LoadStream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ inline uint4 LoadCached(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
#endif

// 8 bf16 values <-> one uint4 (16 bytes).
__device__ inline void Bf16x8ToFloat(const uint4& v, float* out) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ inline uint4 FloatToBf16x8(const float* in) {
  uint4 v;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  return v;
}

// Rounds through bf16 (what storing and reloading a bf16 tensor does).
// SwiGLU's product silu(g) * u = g / (1 + e^-g) * u in fp32 (silu_mul.h; the fused FP8 quantization
// of fp8_quant.cu computes the same).
__device__ inline float SiluTimes(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__device__ inline float RoundBf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ inline float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ inline float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats in shared memory; the call synchronizes the block twice.
__device__ inline float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < num_warps ? scratch[lane] : 0.0f;
  total = WarpSum(total);
  __syncthreads();  // scratch may be reused right after
  return total;
}

__device__ inline float BlockMax(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = WarpMax(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < num_warps ? scratch[lane] : -INFINITY;
  total = WarpMax(total);
  __syncthreads();
  return total;
}

// (value, index) order of cpu::TopK / cpu::Argmax: larger value first, then lower index.
__device__ inline bool Better(float v, int i, float bv, int bi) {
  return v > bv || (v == bv && i < bi);
}

// The best (value, index) pair over the warp; every lane gets it.
__device__ inline void WarpBest(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFullMask, v, o);
    const int oi = __shfl_xor_sync(kFullMask, i, o);
    if (Better(ov, oi, v, i)) { v = ov; i = oi; }
  }
}

// The best pair over the block (blockDim.x a multiple of 32); every thread gets it. scratch_v /
// scratch_i: 32 entries each in shared memory; the call synchronizes the block twice. An empty
// block gives (-inf, INT_MAX).
__device__ inline void BlockBest(float& v, int& i, float* scratch_v, int* scratch_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
  WarpBest(v, i);
  if (lane == 0) { scratch_v[warp] = v; scratch_i[warp] = i; }
  __syncthreads();
  v = lane < num_warps ? scratch_v[lane] : -INFINITY;
  i = lane < num_warps ? scratch_i[lane] : INT_MAX;
  WarpBest(v, i);
  __syncthreads();
}

}  // namespace tandem::cuda::detail
