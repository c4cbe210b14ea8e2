// cuBLAS and cuBLASLt opened on first use (issue 29, memory): tandem does not link libcublas /
// libcublasLt (no DT_NEEDED), cublas_loader.cc defines the cublas* / cublasLt* entry points the CUDA
// ops call and forwards each to the library, which it dlopen()s by soname (libcublas.so.13,
// libcublasLt.so.13: the loader's normal search, LD_LIBRARY_PATH, the binary's RUNPATH, ld.so.conf)
// the first time one of them is called. A process that never runs a CUDA op (tandem generate
// --device cpu) maps neither: libcublasLt alone is ~134 MB resident once loaded.
//
// A library or symbol that cannot be loaded makes the entry point return
// CUBLAS_STATUS_NOT_INITIALIZED, and cublasGetStatusString of that status then says which library
// or symbol and dlerror()'s text, so the ops' usual error path (cuda_check.h) reports it.
// A new cuBLAS function in the ops needs its forwarder in cublas_loader.cc (else: an undefined
// reference at link time).
#pragma once

#include <string>

#include "common/status.h"

namespace tandem::cuda {

// Opens libcublas and libcublasLt now (otherwise done by the first cuBLAS call) and resolves every
// entry point tandem forwards. Errors: Internal, naming the library or symbol and dlerror()'s text.
Status LoadCublas();

// True once a cuBLAS call (or LoadCublas) has opened the libraries in this process.
bool CublasLoaded();

}  // namespace tandem::cuda
