// Linear layers as torch.nn.functional.linear: y = x W^T (+ b), x and y fp32, W [n, k] (Hugging
// Face's [out, in]) in bf16, f16 or fp32 as the checkpoint holds it (weight_matrix.h; issue 29).
//
//   Our own kernels (gemv.h) stream W once for all m rows of x, converting every element exactly to
//     fp32 and accumulating with fp32 FMAs: W in L1-sized tiles, each run against every group of 4
//     rows of x. AVX-512 or AVX2 as the CPU allows (chosen at run time), for every m; W's rows are
//     split across the CPU pool (thread_pool.h).
//   The portable kernel (no AVX2, or not x86) up to m = 16 only; above, each pool thread converts
//     its rows of W to fp32 in chunks (a scratch of its own, at most ~256 KiB) and calls cblas_sgemm
//     on each chunk, or on W itself when fp32. OpenBLAS runs single-threaded: the pool is the only
//     parallelism.
// Every output element is one fp32 sum over k: the results match a cblas_sgemm over W converted to
// fp32 up to the order of the additions (a few ulps), independently of the thread count.
#pragma once

#include <cstdint>

#include "kernels/cpu/weight_matrix.h"

namespace tandem::cpu {

// x: [m, k] (row stride k = w.cols), w: [n, k], bias: [n] or nullptr, y: [m, n] (row stride n).
// m >= 0; m == 0 or n == 0 does nothing. x and y must not overlap.
void Linear(const float* x, int m, const WeightMatrix& w, const float* bias, float* y);

// The same on the calling thread only (Linear splits W's rows across the CPU pool), for callers that
// split their work across the pool themselves (e.g. by rows of x). The SIMD kernels give Linear's
// values bit for bit; the portable kernel takes x in groups of 16 rows (Linear's OpenBLAS path above
// 16 rows sums in another order).
void LinearOnThread(const float* x, int m, const WeightMatrix& w, const float* bias, float* y);

// The same with an fp32 W [n, k].
void Linear(const float* x, int m, int k, const float* w, int n, const float* bias, float* y);

// Threads of the CPU kernels: the size of the CPU pool (caller + n - 1 workers; thread_pool.h), n < 1
// taken as 1. Also sets OpenBLAS to one thread (openblas_set_num_threads(1)), so its pool never
// competes with ours. Without a call the pool has common/cpu_cores.h UsableCores() threads. The CPU
// engine sets it from --threads or UsableCores().
void SetLinearThreads(int n);
int LinearThreads();

// The instruction sets of our kernels. kAuto: the best the CPU has (AVX-512 F+BW+VL, else
// AVX2+FMA+F16C, else portable); the environment variable TANDEM_CPU_ISA (scalar, avx2, avx512) caps it.
enum class LinearIsa { kAuto, kScalar, kAvx2, kAvx512 };
bool LinearIsaSupported(LinearIsa isa);  // whether this CPU (and OS) runs it; kAuto and kScalar: true
LinearIsa ActiveLinearIsa();              // the one Linear uses now
const char* LinearIsaName(LinearIsa isa);  // "auto", "scalar", "avx2", "avx512"
// Test hook: makes Linear use `isa` (kAuto: back to the default choice). false, changing nothing,
// when the CPU lacks it. Not while another thread runs Linear.
bool SetLinearIsaForTesting(LinearIsa isa);

}  // namespace tandem::cpu
