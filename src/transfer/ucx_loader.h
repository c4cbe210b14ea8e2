// UCX opened on first use (issue 29, memory): tandem does not link libucp / libucs (no DT_NEEDED);
// ucx_loader.cc defines the ucp_* / ucs_* functions the ucx backend calls and forwards each to
// libucp.so.0, which it dlopen()s (with libucs, libuct, libucm, ... that it needs) when the first
// ucx backend is made. A process with no ucx transfer configured (tandem generate, a worker on the
// tcp or cuda_ipc backend) maps none of them: ~1 MB resident with their dependencies (rdma-core,
// libnl, psm) at start.
//
// MakeUcxBackend calls LoadUcx first, so a missing library is its FailedPrecondition error naming
// the library and dlerror()'s text. A forwarder called without the library returns
// UCS_ERR_NO_DEVICE (a status pointer of it, nothing for void functions, 0 progress), and
// ucs_status_string of that status says what failed to load. A new UCX function in the backend
// needs its forwarder in ucx_loader.cc (else: an undefined reference at link time).
#pragma once

#include "common/status.h"

namespace tandem::transfer {

// Opens libucp.so.0 now and resolves every forwarded function. Errors: FailedPrecondition with the
// library or symbol that could not be loaded and dlerror()'s text (kept for later calls).
Status LoadUcx();

// True once LoadUcx (or a forwarded call) has opened the library in this process.
bool UcxLoaded();

}  // namespace tandem::transfer
