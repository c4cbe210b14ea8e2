// Names the calling thread, as /proc/<pid>/task/<tid>/comm, top -H, perf and gdb show it (Linux
// keeps the first 15 bytes). scripts/gpu-serve-bench.sh sums CPU time by these names.
#pragma once

#include <pthread.h>

namespace tandem {

inline void SetCurrentThreadName(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace tandem
