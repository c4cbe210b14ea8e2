// libfabric opened on first use (issue 29, memory): tandem does not link libfabric (no DT_NEEDED);
// libfabric_loader.cc defines the fi_* functions the libfabric backend calls (the rest of the API
// is inline calls through the objects' operation tables) and forwards each to libfabric.so.1,
// which it dlopen()s (with rdma-core, psm, libnl ... that it needs) when the first libfabric
// backend is made. A process with no libfabric transfer configured maps none of them.
//
// MakeLibfabricBackend calls LoadLibfabric first, so a missing library is its FailedPrecondition
// error naming the library and dlerror()'s text. A forwarder called without the library returns
// -FI_ENOSYS (nullptr from fi_dupinfo, 0 from fi_version), and fi_strerror(FI_ENOSYS) then says
// what failed to load. A new non-inline fi_* function in the backend needs its forwarder in
// libfabric_loader.cc (else: an undefined reference at link time).
#pragma once

#include "common/status.h"

namespace tandem::transfer {

// Opens libfabric.so.1 now and resolves every forwarded function. Errors: FailedPrecondition with
// the library or symbol that could not be loaded and dlerror()'s text (kept for later calls).
Status LoadLibfabric();

// True once LoadLibfabric (or a forwarded call) has opened the library in this process.
bool LibfabricLoaded();

}  // namespace tandem::transfer
