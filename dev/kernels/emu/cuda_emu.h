// CPU emulation of the CUDA subset the tandem kernels use, to run cuda_op_check on a machine with no
// GPU (dev/kernels/emu/run.sh). Force-included (-include) into every translation unit, .cu files
// compiled as C++ with TANDEM_CUDA_EMU defined.
//
// A block runs as blockDim fibers (ucontext) on one OS thread, one block after another:
// __syncthreads waits on a barrier over the block, each warp has its own barrier and exchange slots
// for __syncwarp, shuffles and votes. __shared__ becomes `static` (one copy, blocks run one at a
// time). WMMA
// fragments hold the whole 16x16 tile in every lane; load/mma are done by every lane, store by
// lane 0. Runtime calls work on host memory; cublasGemmEx runs the supported case with loops.
// Not emulated: timing, streams, asynchrony, most of the API. Run with EMU_ORDER=reverse as well:
// a missing __syncthreads/__syncwarp gives a wrong result in one of the two schedules.
#pragma once

#define __shared__ static
#define __launch_bounds__(...)
#define TANDEM_DYNAMIC_SHARED(name) unsigned char* name = ::emu::DynamicSmem()

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

using std::max;
using std::min;

inline uint3 blockIdx;  // one block runs at a time; threadIdx is per fiber (below)
inline dim3 blockDim;
inline dim3 gridDim;

namespace emu {

// One block's fibers. A thread runs until it waits at a barrier or returns; the scheduler resumes
// threads in the chosen order (EMU_ORDER=reverse runs lane 31 first), so a read that lacks its
// barrier sees stale data in one of the orders and the check fails.
struct Fiber {
  ucontext_t ctx;
  bool done = false;
};
struct CpCopy {  // a cp.async in flight: the source is read at issue, the destination written at wait
  void* dst;
  unsigned char bytes[16];
};
struct Barrier {
  int alive = 0;
  int arrived = 0;
  uint64_t gen = 0;
};
struct BlockState {
  std::vector<Fiber> fibers;
  Barrier block;
  std::vector<Barrier> warps;
  std::vector<uint64_t> slots;  // 32 per warp, for shuffles and votes
  std::vector<unsigned char> xbuf;  // 2 x 64 bytes per thread, for warp-wide fragment exchanges
  std::vector<unsigned char> xparity;  // per thread: which half of xbuf its next exchange uses
  std::vector<std::vector<CpCopy>> cp_open;                 // per thread: not committed
  std::vector<std::vector<std::vector<CpCopy>>> cp_groups;  // per thread: committed, oldest first
  unsigned char* dyn_smem = nullptr;
  ucontext_t scheduler;
};
inline BlockState* g_block = nullptr;
inline int g_tid = 0;  // the running fiber

inline unsigned char* DynamicSmem() { return g_block->dyn_smem; }
inline uint3 ThreadIdx() {
  const unsigned t = static_cast<unsigned>(g_tid);
  return make_uint3(t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y));
}
inline int Lane() { return g_tid % 32; }

inline void Yield() { swapcontext(&g_block->fibers[g_tid].ctx, &g_block->scheduler); }

inline void Wait(Barrier& b) {
  const uint64_t gen = b.gen;
  if (++b.arrived == b.alive) {
    b.arrived = 0;
    ++b.gen;
    return;
  }
  while (b.gen == gen) Yield();
}

inline void Leave(Barrier& b) {  // a returning thread no longer takes part
  --b.alive;
  if (b.alive > 0 && b.arrived == b.alive) {
    b.arrived = 0;
    ++b.gen;
  }
}

// Exchanges one value per lane of the warp; returns all 32.
template <typename T>
inline void Exchange(T v, T* all) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  uint64_t* slot = &g_block->slots[(g_tid / 32) * 32];
  slot[Lane()] = bits;
  Wait(g_block->warps[g_tid / 32]);
  for (int i = 0; i < 32; ++i) std::memcpy(&all[i], &slot[i], sizeof(T));
  Wait(g_block->warps[g_tid / 32]);
}

// Exchanges a value of up to 64 bytes per lane (mma / ldmatrix fragments); returns all 32. One
// barrier: consecutive exchanges alternate between two buffers, and a lane can only come back to
// a buffer after every lane has passed the next exchange's barrier (done reading this one).
template <typename T>
inline void ExchangeAll(const T& v, T* all) {
  static_assert(sizeof(T) <= 64);
  unsigned char& parity = g_block->xparity[g_tid];
  unsigned char* base =
      &g_block->xbuf[(static_cast<size_t>(parity) * g_block->fibers.size() + (g_tid / 32) * 32) * 64];
  parity ^= 1;
  std::memcpy(base + Lane() * 64, &v, sizeof(T));
  Wait(g_block->warps[g_tid / 32]);
  for (int i = 0; i < 32; ++i) std::memcpy(&all[i], base + i * 64, sizeof(T));
}

inline std::function<void()>* g_body = nullptr;
inline void FiberMain() {
  (*g_body)();
  Leave(g_block->warps[g_tid / 32]);
  Leave(g_block->block);
  g_block->fibers[g_tid].done = true;
  // returning switches to uc_link (the scheduler)
}

inline bool Reverse() {
  static const bool reverse = [] {
    const char* o = std::getenv("EMU_ORDER");
    return o != nullptr && std::strcmp(o, "reverse") == 0;
  }();
  return reverse;
}

template <typename Kernel, typename... Args>
void Launch(Kernel kernel, dim3 grid, dim3 block, size_t smem, Args... args) {
  const int n = static_cast<int>(block.x * block.y * block.z);
  if (n % 32 != 0) std::abort();  // the kernels use whole warps
  constexpr size_t kStack = 256 * 1024;
  static std::vector<std::unique_ptr<char[]>> stacks;
  while (stacks.size() < static_cast<size_t>(n)) stacks.emplace_back(new char[kStack]);
  std::vector<unsigned char> dyn(smem + 128, 0xAB);
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        BlockState state;
        state.fibers.resize(n);
        state.block.alive = n;
        state.warps.resize(n / 32);
        for (Barrier& w : state.warps) w.alive = 32;
        state.slots.assign(n, 0);
        state.xbuf.assign(static_cast<size_t>(n) * 2 * 64, 0);
        state.xparity.assign(n, 0);
        state.cp_open.resize(n);
        state.cp_groups.resize(n);
        state.dyn_smem = reinterpret_cast<unsigned char*>(
            (reinterpret_cast<uintptr_t>(dyn.data()) + 127) & ~uintptr_t{127});
        g_block = &state;
        blockIdx = make_uint3(bx, by, bz);
        blockDim = block;
        gridDim = grid;
        std::function<void()> body = [&] { kernel(args...); };
        g_body = &body;
        for (int t = 0; t < n; ++t) {
          Fiber& f = state.fibers[t];
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = stacks[t].get();
          f.ctx.uc_stack.ss_size = kStack;
          f.ctx.uc_link = &state.scheduler;
          makecontext(&f.ctx, FiberMain, 0);
        }
        for (int remaining = n; remaining > 0;) {
          remaining = 0;
          for (int i = 0; i < n; ++i) {
            const int t = Reverse() ? n - 1 - i : i;
            if (state.fibers[t].done) continue;
            g_tid = t;
            swapcontext(&state.scheduler, &state.fibers[t].ctx);
            if (!state.fibers[t].done) ++remaining;
          }
        }
        g_block = nullptr;
      }
    }
  }
}

// ---- runtime API on host memory ----
template <typename T>
cudaError_t Malloc(T** p, size_t bytes) {
  *p = static_cast<T*>(std::aligned_alloc(256, (bytes + 255) / 256 * 256));
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t Free(void* p) { std::free(p); return cudaSuccess; }
inline cudaError_t Memcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t Memset(void* d, int v, size_t n) { std::memset(d, v, n); return cudaSuccess; }
inline cudaError_t Ok() { return cudaSuccess; }
template <typename... A>
cudaError_t OkAny(A...) { return cudaSuccess; }
inline cudaError_t MemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k, cudaStream_t) {
  return Memcpy(d, s, n, k);
}
inline cudaError_t StreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = reinterpret_cast<cudaStream_t>(new int(0));
  return cudaSuccess;
}
inline cudaError_t StreamDestroy(cudaStream_t s) { delete reinterpret_cast<int*>(s); return cudaSuccess; }
inline cudaError_t GetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t GetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof(*p));
  std::strcpy(p->name, "CPU emulation (dev/kernels/emu)");
  p->major = 9;
  p->multiProcessorCount = 1;
  return cudaSuccess;
}
inline cudaError_t Version(int* v) { *v = 0; return cudaSuccess; }
template <typename F>
cudaError_t FuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t EventCreate(cudaEvent_t* e) { *e = nullptr; return cudaSuccess; }
inline cudaError_t EventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = nullptr; return cudaSuccess; }
inline cudaError_t EventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t EventRecordWithFlags(cudaEvent_t, cudaStream_t = nullptr, unsigned = 0) {
  return cudaSuccess;
}
// Every pointer is host memory the "device" reaches.
inline cudaError_t PointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  *a = cudaPointerAttributes{};
  a->type = cudaMemoryTypeHost;
  a->devicePointer = const_cast<void*>(p);
  a->hostPointer = const_cast<void*>(p);
  return cudaSuccess;
}
// No graphs here (BeginCapture fails): a stream is never capturing.
inline cudaError_t StreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
inline cudaError_t EventOne(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t EventElapsed(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 0; return cudaSuccess; }
inline cudaError_t GetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t DeviceGetAttribute(int* v, cudaDeviceAttr attr, int) {
  *v = attr == cudaDevAttrMultiProcessorCount ? 1 : 0;
  return cudaSuccess;
}
// Pinned host memory is plain host memory here.
inline cudaError_t MallocHost(void** p, size_t bytes) { return Malloc(p, bytes); }
inline cudaError_t MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *free_bytes = size_t{8} << 30;  // an 8 GiB pretend device
  *total_bytes = size_t{8} << 30;
  return cudaSuccess;
}
// CUDA graphs: capture is not emulated (the runner falls back to running the step eagerly).
inline cudaError_t BeginCapture(cudaStream_t, cudaStreamCaptureMode) { return cudaErrorNotSupported; }
inline cudaError_t EndCapture(cudaStream_t, cudaGraph_t* g) { *g = nullptr; return cudaErrorNotSupported; }
template <typename... A>
cudaError_t NotSupported(A...) { return cudaErrorNotSupported; }
inline const char* ErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }

// ---- cuBLAS: the GEMM of cuda::Linear (op T on A, op N on B, bf16 in, bf16/fp32 out, fp32) ----
inline cublasStatus_t Create(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t Destroy(cublasHandle_t h) { delete reinterpret_cast<int*>(h); return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t SetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t GetStream(cublasHandle_t, cudaStream_t* s) { *s = nullptr; return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t SetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
inline const char* StatusString(cublasStatus_t) { return "emulated cublas status"; }
inline cublasStatus_t GemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                             int k, const void* alpha, const void* A, cudaDataType_t at, int lda,
                             const void* B, cudaDataType_t bt, int ldb, const void* beta, void* C,
                             cudaDataType_t ct, int ldc, cublasComputeType_t, cublasGemmAlgo_t) {
  if (ta != CUBLAS_OP_T || tb != CUBLAS_OP_N || at != CUDA_R_16BF || bt != CUDA_R_16BF ||
      *static_cast<const float*>(beta) != 0.0f) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const auto* a = static_cast<const __nv_bfloat16*>(A);
  const auto* b = static_cast<const __nv_bfloat16*>(B);
  const float al = *static_cast<const float*>(alpha);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {  // C[i + j ldc] = sum_l A[l + i lda] B[l + j ldb]
      float acc = 0.0f;
      for (int l = 0; l < k; ++l) {
        acc += __bfloat162float(a[l + static_cast<int64_t>(i) * lda]) *
               __bfloat162float(b[l + static_cast<int64_t>(j) * ldb]);
      }
      const int64_t idx = i + static_cast<int64_t>(j) * ldc;
      if (ct == CUDA_R_16BF) {
        static_cast<__nv_bfloat16*>(C)[idx] = __float2bfloat16_rn(al * acc);
      } else {
        static_cast<float*>(C)[idx] = al * acc;
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace emu

// ---- device built-ins ----
inline void __syncthreads() { emu::Wait(emu::g_block->block); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::Wait(emu::g_block->warps[emu::g_tid / 32]); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int o, int = 32) {
  T all[32];
  emu::Exchange(v, all);
  return all[emu::Lane() ^ o];
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src, int width = 32) {
  T all[32];
  emu::Exchange(v, all);
  return all[(emu::Lane() & ~(width - 1)) + (src & (width - 1))];
}
inline int __any_sync(unsigned, int pred) {
  int all[32];
  emu::Exchange(pred, all);
  for (int p : all) if (p) return 1;
  return 0;
}

#define threadIdx (::emu::ThreadIdx())

#define TANDEM_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::emu::Launch(kernel, dim3(grid), dim3(block), smem, __VA_ARGS__)
// One kernel after another: programmatic dependent launch is an ordinary launch here.
#define TANDEM_LAUNCH_PDL(kernel, grid, block, smem, stream, pdl, ...) \
  ::emu::Launch(kernel, dim3(grid), dim3(block), smem, __VA_ARGS__)

#define cudaMalloc ::emu::Malloc
#define cudaFree ::emu::Free
#define cudaMemcpy ::emu::Memcpy
#define cudaMemset ::emu::Memset
#define cudaDeviceSynchronize ::emu::Ok
#define cudaSetDevice ::emu::OkAny
#define cudaStreamSynchronize ::emu::OkAny
#define cudaStreamCreateWithFlags ::emu::StreamCreateWithFlags
#define cudaStreamDestroy ::emu::StreamDestroy
#define cudaMemcpyAsync ::emu::MemcpyAsync
#define cudaGetLastError ::emu::Ok
#define cudaGetDeviceCount ::emu::GetDeviceCount
#define cudaGetDeviceProperties ::emu::GetDeviceProperties
#define cudaDriverGetVersion ::emu::Version
#define cudaRuntimeGetVersion ::emu::Version
#define cudaFuncSetAttribute ::emu::FuncSetAttribute
#define cudaEventCreate ::emu::EventCreate
#define cudaEventCreateWithFlags ::emu::EventCreateWithFlags
#define cudaEventQuery ::emu::EventOne  // work runs synchronously here: every event has completed
#define cudaEventRecord ::emu::EventRecord
#define cudaEventRecordWithFlags ::emu::EventRecordWithFlags
#define cudaStreamIsCapturing ::emu::StreamIsCapturing
#define cudaPointerGetAttributes ::emu::PointerGetAttributes
#define cudaEventSynchronize ::emu::EventOne
#define cudaEventDestroy ::emu::EventOne
#define cudaEventElapsedTime ::emu::EventElapsed
#define cudaGetDevice ::emu::GetDevice
#define cudaDeviceGetAttribute ::emu::DeviceGetAttribute
#define cudaMallocHost ::emu::MallocHost
#define cudaMemGetInfo ::emu::MemGetInfo
#define cudaFreeHost ::emu::Free
#define cudaStreamBeginCapture ::emu::BeginCapture
#define cudaStreamEndCapture ::emu::EndCapture
#define cudaGraphInstantiate ::emu::NotSupported
#define cudaGraphLaunch ::emu::NotSupported
#define cudaGraphDestroy ::emu::OkAny
#define cudaGraphExecDestroy ::emu::OkAny
#define cudaGetErrorString ::emu::ErrorString
#define cudaGetErrorName ::emu::ErrorString
#define cublasCreate ::emu::Create
#define cublasDestroy ::emu::Destroy
#define cublasSetStream ::emu::SetStream
#define cublasSetWorkspace ::emu::SetWorkspace
#define cublasGetStream ::emu::GetStream
#define cublasGemmEx ::emu::GemmEx
#define cublasGetStatusString ::emu::StatusString

// ---- WMMA (nvcuda::wmma) for 16x16x16, bf16 inputs, fp32 accumulators ----
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  float x[16 * 16];  // row-major tile, the same in every lane
};

// WMMA's rules: a 256-bit aligned pointer, ldm a multiple of 16 bytes.
template <typename T>
inline void CheckTile(const T* p, unsigned ldm) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * sizeof(T)) % 16 != 0) {
    std::fprintf(stderr, "emu: WMMA tile at %p, ldm %u breaks the alignment rules\n",
                 static_cast<const void*>(p), ldm);
    std::abort();
  }
}

template <typename Use, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  CheckTile(p, ldm);
  constexpr bool kColMajor = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) {
      f.x[r * 16 + c] = __bfloat162float(kColMajor ? p[r + c * ldm] : p[r * ldm + c]);
    }
  }
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
  CheckTile(p, ldm);
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = layout == mem_row_major ? p[r * ldm + c] : p[r + c * ldm];
  }
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  CheckTile(p, ldm);
  if (emu::Lane() != 0) return;
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[r + c * ldm]) = f.x[r * 16 + c];
  }
}
template <typename Use, typename T, typename L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, float v) {
  std::fill(f.x, f.x + 256, v);
}
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  float out[256];
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float acc = c.x[i * 16 + j];
      for (int l = 0; l < 16; ++l) acc += a.x[i * 16 + l] * b.x[l * 16 + j];
      out[i * 16 + j] = acc;
    }
  }
  std::copy(out, out + 256, d.x);
}
}  // namespace nvcuda::wmma

// ---- mma.sync / ldmatrix / cp.async (src/kernels/cuda/mma_utils.cuh routes here) ----
// Warp-level: every lane of the warp must call them together (as on the device, .aligned); each
// lane gets its own registers per the PTX ISA's fragment layouts (see mma_utils.cuh).
namespace emu {

inline float Bf16Half(uint32_t w, int hi) {
  const uint32_t bits = (hi ? (w >> 16) : (w & 0xffffu)) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// IEEE binary16 bits -> float, exactly (subnormals included).
inline float F16Bits(uint32_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v = exp == 0 ? std::ldexp(static_cast<float>(man), -24)
            : exp == 31 ? (man == 0 ? INFINITY : NAN)
                        : std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}
inline float F16Half(uint32_t w, int hi) { return F16Bits(hi ? (w >> 16) : (w & 0xffffu)); }

// d += A B, m16n8k16, bf16 A (row) and B (col), fp32 accumulators; f16: the same with f16 inputs.
inline void MmaM16N8K16(float d[4], const uint32_t a[4], const uint32_t b[2], bool f16);
inline void MmaM16N8K16Bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) { MmaM16N8K16(d, a, b, false); }
inline void MmaM16N8K16F16(float d[4], const uint32_t a[4], const uint32_t b[2]) { MmaM16N8K16(d, a, b, true); }
inline void MmaM16N8K16(float d[4], const uint32_t a[4], const uint32_t b[2], bool f16) {
  auto Half = [f16](uint32_t w, int hi) { return f16 ? F16Half(w, hi) : Bf16Half(w, hi); };
  struct Frag {
    uint32_t a[4], b[2];
  };
  Frag mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  Frag all[32];
  ExchangeAll(mine, all);
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int e = 0; e < 2; ++e) {
      A[g][2 * t + e] = Half(all[l].a[0], e);
      A[g + 8][2 * t + e] = Half(all[l].a[1], e);
      A[g][2 * t + 8 + e] = Half(all[l].a[2], e);
      A[g + 8][2 * t + 8 + e] = Half(all[l].a[3], e);
      B[2 * t + e][g] = Half(all[l].b[0], e);
      B[2 * t + 8 + e][g] = Half(all[l].b[1], e);
    }
  }
  const int g = Lane() >> 2, t = Lane() & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >> 1) * 8, col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
    d[i] = acc;
  }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives row l % 8 of matrix l / 8.
inline void LdMatrix(uint32_t r[4], const void* row, bool trans) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr, "emu: ldmatrix row address %p is not 16-byte aligned\n", row);
    std::abort();
  }
  const void* rows[32];
  ExchangeAll(row, rows);
  const int g = Lane() >> 2, t = Lane() & 3;
  for (int i = 0; i < 4; ++i) {
    uint16_t lo, hi;
    if (!trans) {  // row g, columns 2t and 2t + 1
      const uint16_t* p = static_cast<const uint16_t*>(rows[8 * i + g]);
      lo = p[2 * t];
      hi = p[2 * t + 1];
    } else {  // rows 2t and 2t + 1, column g
      lo = static_cast<const uint16_t*>(rows[8 * i + 2 * t])[g];
      hi = static_cast<const uint16_t*>(rows[8 * i + 2 * t + 1])[g];
    }
    r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
}

// cp.async 16 bytes: the destination is written only when a wait_group retires its group, so a
// read of the buffer before the wait (or before the barrier after it) sees stale bytes.
inline void CpAsync16(void* dst, const void* src, bool valid) {
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || (valid && reinterpret_cast<uintptr_t>(src) % 16 != 0)) {
    std::fprintf(stderr, "emu: cp.async 16 with misaligned address (%p <- %p)\n", dst, src);
    std::abort();
  }
  CpCopy c;
  c.dst = dst;
  if (valid) {
    std::memcpy(c.bytes, src, 16);
  } else {
    std::memset(c.bytes, 0, 16);
  }
  g_block->cp_open[g_tid].push_back(c);
}
inline void CpAsyncCommit() {
  g_block->cp_groups[g_tid].push_back(std::move(g_block->cp_open[g_tid]));
  g_block->cp_open[g_tid].clear();
}
inline void CpAsyncWait(int n) {
  auto& groups = g_block->cp_groups[g_tid];
  while (static_cast<int>(groups.size()) > n) {
    for (const CpCopy& c : groups.front()) std::memcpy(c.dst, c.bytes, 16);
    groups.erase(groups.begin());
  }
}

}  // namespace emu
