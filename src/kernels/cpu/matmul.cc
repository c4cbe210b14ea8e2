#include "kernels/cpu/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cpu/gemv.h"
#include "kernels/cpu/thread_pool.h"

namespace tandem::cpu {
namespace {

// A GEMV task covers at least this many weight elements (at m = 1; more rows of x weigh more), so a
// dispatch (~1 us) stays small against the work; at most kTasksPerThread tasks a thread, so a thread
// the OS delays leaves its share to the others.
constexpr int64_t kMinTaskElems = 32768;
constexpr int kTasksPerThread = 4;
// fp32 scratch per thread for the chunked path (m > 16): 256 KiB, L2-resident.
constexpr int64_t kScratchFloats = 64 * 1024;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

LinearIsa BestIsa() {
  LinearIsa best = LinearIsa::kScalar;
  if (LinearIsaSupported(LinearIsa::kAvx512)) {
    best = LinearIsa::kAvx512;
  } else if (LinearIsaSupported(LinearIsa::kAvx2)) {
    best = LinearIsa::kAvx2;
  }
  // TANDEM_CPU_ISA caps the choice (benchmarks of the fallbacks).
  if (const char* env = std::getenv("TANDEM_CPU_ISA")) {
    if (std::strcmp(env, "scalar") == 0) best = LinearIsa::kScalar;
    if (std::strcmp(env, "avx2") == 0 && best == LinearIsa::kAvx512) best = LinearIsa::kAvx2;
  }
  return best;
}

GemvKernels KernelsFor(LinearIsa isa) {
  switch (isa) {
    case LinearIsa::kAvx512: return Avx512GemvKernels();
    case LinearIsa::kAvx2: return Avx2GemvKernels();
    default: return ScalarGemvKernels();
  }
}

struct Active {
  GemvKernels auto_kernels = KernelsFor(BestIsa());
  std::atomic<const GemvKernels*> kernels{&auto_kernels};
  GemvKernels forced;
};

Active& ActiveState() {
  static Active* a = new Active();
  return *a;
}

const GemvKernels& Kernels() { return *ActiveState().kernels.load(std::memory_order_acquire); }

// OpenBLAS single-threaded once, whether or not SetLinearThreads is called.
void OpenBlasSingleThreaded() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void AddBias(const float* bias, int m, int64_t n, int64_t row_begin, int64_t row_end, float* y) {
  for (int i = 0; i < m; ++i) {
    float* yi = y + i * n;
    for (int64_t j = row_begin; j < row_end; ++j) yi[j] += bias[j];
  }
}

// Any m (the kernels take a tile of W against every row of x).
void SkinnyLinear(const float* x, int m, const WeightMatrix& w, const float* bias, float* y) {
  const GemvKernels& kernels = Kernels();
  const int64_t n = w.rows;
  const int64_t cost = w.rows * w.cols * (m + 3) / 4;
  const std::shared_ptr<ThreadPool> pool = CpuPool();
  const int threads = pool->num_threads();
  const int64_t tasks = std::clamp<int64_t>(cost / kMinTaskElems, 1, int64_t{kTasksPerThread} * threads);
  const int64_t rows_per_task = CeilDiv(CeilDiv(n, tasks), 8) * 8;  // whole blocks of 8 rows
  const int num_tasks = static_cast<int>(CeilDiv(n, rows_per_task));
  pool->ParallelFor(num_tasks, [&](int t) {
    const int64_t begin = t * rows_per_task;
    const int64_t end = std::min(n, begin + rows_per_task);
    kernels.gemv(x, m, w, begin, end, bias, y, n);
  });
}

// y[:, rows] = x W[rows]^T by OpenBLAS, W[rows] fp32 at wf (row stride k).
void SgemmRows(const float* x, int m, int64_t k, const float* wf, int64_t row_begin, int64_t num_rows,
               int64_t n, float* y) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(num_rows), static_cast<int>(k),
              1.0f, x, static_cast<int>(k), wf, static_cast<int>(k), 0.0f, y + row_begin, static_cast<int>(n));
}

// m > kGemvMaxRows on the portable ISA.
void ChunkedLinear(const float* x, int m, const WeightMatrix& w, const float* bias, float* y) {
  const int64_t n = w.rows, k = w.cols;
  const std::shared_ptr<ThreadPool> pool = CpuPool();
  const int threads = pool->num_threads();
  // Rows per task: the thread's share, capped by the scratch for 16-bit weights.
  int64_t rows = CeilDiv(n, threads);
  if (w.type != WeightType::kF32) rows = std::min(rows, std::max<int64_t>(8, kScratchFloats / k));
  // A multiple of the thread count where that keeps tasks of at least 8 rows (no thread idles while
  // another takes a last chunk).
  int64_t tasks = CeilDiv(n, rows);
  if (tasks > threads && tasks % threads != 0) {
    const int64_t even = CeilDiv(tasks, threads) * threads;
    if (CeilDiv(n, even) >= 8) rows = CeilDiv(n, even);
  }
  const int num_tasks = static_cast<int>(CeilDiv(n, rows));
  const ConvertFn convert = Kernels().convert;
  pool->ParallelFor(num_tasks, [&](int t) {
    const int64_t begin = t * rows;
    const int64_t count = std::min(n, begin + rows) - begin;
    if (w.type == WeightType::kF32) {
      SgemmRows(x, m, k, static_cast<const float*>(w.data) + begin * k, begin, count, n, y);
    } else {
      thread_local std::vector<float> scratch;
      scratch.resize(static_cast<size_t>(count * k));
      convert(w, begin, count, scratch.data());
      SgemmRows(x, m, k, scratch.data(), begin, count, n, y);
    }
    if (bias != nullptr) AddBias(bias, m, n, begin, begin + count, y);
  });
}

}  // namespace

void Linear(const float* x, int m, const WeightMatrix& w, const float* bias, float* y) {
  if (m <= 0 || w.rows == 0) return;
  OpenBlasSingleThreaded();
  // The SIMD kernels beat OpenBLAS's sgemm at every m (bench/linear_bench: 1.7-3x with AVX-512,
  // 1.3-1.5x with AVX2 at m = 128 and 512, over fp32 chunks of W); the portable one only up to 16 rows.
  if (m <= kGemvMaxRows || Kernels().isa != LinearIsa::kScalar) {
    SkinnyLinear(x, m, w, bias, y);
  } else {
    ChunkedLinear(x, m, w, bias, y);
  }
}

void LinearOnThread(const float* x, int m, const WeightMatrix& w, const float* bias, float* y) {
  if (m <= 0 || w.rows == 0) return;
  const GemvKernels& kernels = Kernels();
  const int step = kernels.isa == LinearIsa::kScalar ? kGemvMaxRows : m;
  for (int i0 = 0; i0 < m; i0 += step) {
    kernels.gemv(x + static_cast<int64_t>(i0) * w.cols, std::min(step, m - i0), w, 0, w.rows, bias,
                 y + static_cast<int64_t>(i0) * w.rows, w.rows);
  }
}

void Linear(const float* x, int m, int k, const float* w, int n, const float* bias, float* y) {
  Linear(x, m, WeightMatrix{WeightType::kF32, w, n, k}, bias, y);
}

void WeightRowsToFloat(const WeightMatrix& w, int64_t row_begin, int64_t num_rows, float* out) {
  if (num_rows > 0) Kernels().convert(w, row_begin, num_rows, out);
}

void SetLinearThreads(int n) {
  openblas_set_num_threads(1);
  SetCpuPoolThreads(n);
}

int LinearThreads() { return CpuPool()->num_threads(); }

bool LinearIsaSupported(LinearIsa isa) {
  switch (isa) {
    case LinearIsa::kAuto:
    case LinearIsa::kScalar:
      return true;
#if defined(__x86_64__) || defined(__i386__)
    case LinearIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case LinearIsa::kAvx512:
      return LinearIsaSupported(LinearIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#endif
    default:
      return false;
  }
}

LinearIsa ActiveLinearIsa() { return Kernels().isa; }

const char* LinearIsaName(LinearIsa isa) {
  switch (isa) {
    case LinearIsa::kAuto: return "auto";
    case LinearIsa::kScalar: return "scalar";
    case LinearIsa::kAvx2: return "avx2";
    case LinearIsa::kAvx512: return "avx512";
  }
  return "?";
}

bool SetLinearIsaForTesting(LinearIsa isa) {
  if (!LinearIsaSupported(isa)) return false;
  Active& a = ActiveState();
  if (isa == LinearIsa::kAuto) {
    a.kernels.store(&a.auto_kernels, std::memory_order_release);
  } else {
    a.forced = KernelsFor(isa);
    a.kernels.store(&a.forced, std::memory_order_release);
  }
  return true;
}

}  // namespace tandem::cpu
