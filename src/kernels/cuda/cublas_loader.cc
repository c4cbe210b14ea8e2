// The cuBLAS / cuBLASLt entry points tandem calls, forwarded to the libraries opened on first use
// (cublas_loader.h says why). Not in the CPU emulator's build (dev/kernels/emu), whose cuda_emu.h
// replaces the cuBLAS subset with macros.
#ifndef TANDEM_CUDA_EMU

#include "kernels/cuda/cublas_loader.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "common/shared_library.h"

namespace tandem::cuda {
namespace {

#define TANDEM_LOADER_STR_INNER(x) #x
#define TANDEM_LOADER_STR(x) TANDEM_LOADER_STR_INNER(x)

struct Library {
  const char* soname;
  const char* what;
  std::once_flag once;
  void* handle = nullptr;
};

// The sonames of the toolkit the build compiled against (cuBLAS 13: libcublas.so.13).
Library g_cublas{"libcublas.so." TANDEM_LOADER_STR(CUBLAS_VER_MAJOR), "cuBLAS, for the CUDA engine", {}};
Library g_cublaslt{"libcublasLt.so." TANDEM_LOADER_STR(CUBLAS_VER_MAJOR), "cuBLASLt, for the CUDA engine",
                   {}};
std::atomic<bool> g_loaded{false};

// The first load or symbol error, kept for cublasGetStatusString (a stable C string: set once,
// never freed).
std::mutex g_error_mu;
std::atomic<const char*> g_error{nullptr};

void RecordError(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_error_mu);
  if (g_error.load() == nullptr) g_error.store((new std::string(message))->c_str());
}

void* Handle(Library& lib) {
  std::call_once(lib.once, [&lib] {
    Result<void*> h = OpenSharedLibrary(lib.soname, lib.what);
    if (h.ok()) {
      lib.handle = *h;
      g_loaded.store(true);
    } else {
      RecordError(h.status().message());
    }
  });
  return lib.handle;
}

// The symbol, or nullptr with the error recorded.
void* Symbol(Library& lib, const char* name) {
  void* h = Handle(lib);
  if (h == nullptr) return nullptr;
  dlerror();
  void* p = dlsym(h, name);
  if (p == nullptr) {
    const char* e = dlerror();
    RecordError(fmt::format("{} ({}) has no symbol {}: {}", lib.soname, lib.what, name,
                            e != nullptr ? e : "null"));
  }
  return p;
}

}  // namespace

bool CublasLoaded() { return g_loaded.load(); }

}  // namespace tandem::cuda

// X(library, name, (parameters), (arguments)): every cuBLAS function tandem calls but
// cublasGetStatusString (below). The names are the libraries' (cublas_v2.h maps cublasCreate to
// cublasCreate_v2 and so on).
#define TANDEM_CUBLAS_ENTRY_POINTS(X)                                                               \
  X(g_cublas, cublasCreate_v2, (cublasHandle_t * handle), (handle))                                 \
  X(g_cublas, cublasDestroy_v2, (cublasHandle_t handle), (handle))                                  \
  X(g_cublas, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream), (handle, stream))   \
  X(g_cublas, cublasGetStream_v2, (cublasHandle_t handle, cudaStream_t * stream), (handle, stream)) \
  X(g_cublas, cublasSetWorkspace_v2, (cublasHandle_t handle, void* workspace, size_t bytes),        \
    (handle, workspace, bytes))                                                                     \
  X(g_cublas, cublasGemmEx,                                                                         \
    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, \
     const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,                  \
     cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,           \
     cublasComputeType_t compute_type, cublasGemmAlgo_t algo),                                      \
    (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,     \
     compute_type, algo))                                                                           \
  X(g_cublaslt, cublasLtCreate, (cublasLtHandle_t * handle), (handle))                              \
  X(g_cublaslt, cublasLtDestroy, (cublasLtHandle_t handle), (handle))                               \
  X(g_cublaslt, cublasLtMatmul,                                                                     \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,          \
     cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,   \
     const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,            \
     const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,                     \
     cudaStream_t stream),                                                                          \
    (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,            \
     workspace_bytes, stream))                                                                      \
  X(g_cublaslt, cublasLtMatmulAlgoGetHeuristic,                                                     \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,              \
     cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,      \
     cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],     \
     int* returned),                                                                                \
    (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref, requested, results, returned))                 \
  X(g_cublaslt, cublasLtMatmulDescCreate,                                                           \
    (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute_type, cudaDataType_t scale_type),     \
    (desc, compute_type, scale_type))                                                               \
  X(g_cublaslt, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))                     \
  X(g_cublaslt, cublasLtMatmulDescSetAttribute,                                                     \
    (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t size), \
    (desc, attr, buf, size))                                                                        \
  X(g_cublaslt, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))        \
  X(g_cublaslt, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))         \
  X(g_cublaslt, cublasLtMatmulPreferenceSetAttribute,                                               \
    (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,   \
     size_t size),                                                                                  \
    (pref, attr, buf, size))                                                                        \
  X(g_cublaslt, cublasLtMatrixLayoutCreate,                                                         \
    (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld), \
    (layout, type, rows, cols, ld))                                                                 \
  X(g_cublaslt, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))

// Each forwarder resolves its symbol once; CUBLAS_STATUS_NOT_INITIALIZED when the library or the
// symbol is missing. Parameters that differ from the header's make a second C function of the same
// name: a compile error.
#define TANDEM_CUBLAS_FORWARD(lib, name, params, args)                                               \
  cublasStatus_t CUBLASWINAPI name params {                                                          \
    static const auto fn = reinterpret_cast<cublasStatus_t(CUBLASWINAPI*) params>(                  \
        ::tandem::cuda::Symbol(::tandem::cuda::lib, #name));                                         \
    return fn != nullptr ? fn args : CUBLAS_STATUS_NOT_INITIALIZED;                                  \
  }

extern "C" {

TANDEM_CUBLAS_ENTRY_POINTS(TANDEM_CUBLAS_FORWARD)

// NOT_INITIALIZED after a load or symbol error: that error's text (which library, dlerror()).
const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  const char* load_error = ::tandem::cuda::g_error.load();
  if (status == CUBLAS_STATUS_NOT_INITIALIZED && load_error != nullptr) return load_error;
  static const auto fn = reinterpret_cast<decltype(&::cublasGetStatusString)>(
      ::tandem::cuda::Symbol(::tandem::cuda::g_cublas, "cublasGetStatusString"));
  if (fn != nullptr) return fn(status);
  load_error = ::tandem::cuda::g_error.load();
  return load_error != nullptr ? load_error : "cuBLAS status (libcublas not loaded)";
}

}  // extern "C"

namespace tandem::cuda {

Status LoadCublas() {
  struct Entry {
    Library* lib;
    const char* name;
  };
#define TANDEM_CUBLAS_ENTRY(lib, name, params, args) {&lib, #name},
  static const Entry kEntries[] = {
      TANDEM_CUBLAS_ENTRY_POINTS(TANDEM_CUBLAS_ENTRY){&g_cublas, "cublasGetStatusString"}};
#undef TANDEM_CUBLAS_ENTRY
  for (const Entry& e : kEntries) {
    if (Symbol(*e.lib, e.name) == nullptr) {
      const char* err = g_error.load();
      return Status(StatusCode::kInternal, err != nullptr ? err : "cuBLAS could not be loaded");
    }
  }
  return Status::Ok();
}

}  // namespace tandem::cuda

#endif  // TANDEM_CUDA_EMU
