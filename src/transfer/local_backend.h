// The "local" backend: peers in the same process, by memcpy on the backend's own worker thread
// (copies of at most 256 KiB with nothing queued run inside Post: cheaper than a thread wake-up).
// Agents find each other through a process-wide registry keyed by instance id (the connection
// info in the metadata). The target's registrations are re-checked and pinned before copying;
// a target agent being destroyed waits for copies into it to finish. Device memory on either side
// is copied through the initiating agent's DeviceCopier (one stream per device, synced before the
// notification); an agent without one refuses it.
#pragma once

#include <memory>

#include "common/status.h"
#include "transfer/backend.h"

namespace tandem::transfer {

// Params: none.
Result<std::unique_ptr<Backend>> MakeLocalBackend(BackendHost& host, const BackendParams& params);

}  // namespace tandem::transfer
