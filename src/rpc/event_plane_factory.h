// MakeEventPlane: the event plane (events/event_plane.h) that EventPlaneOptions::url names: "" or
// "embedded" is the embedded plane over the workers' own gRPC servers (rpc/embedded_event_plane.h),
// nats://host:port the NATS plane (events/nats_event_plane.h, in builds with libnats). It lives in
// rpc, above both, because the embedded plane is a client of the Worker service.
#pragma once

#include <memory>

#include "common/status.h"
#include "events/event_plane.h"

namespace tandem::runtime {

// Errors: InvalidArgument (an unknown URL, nats:// in a build without libnats), FailedPrecondition
// (NATS unreachable: "nats://127.0.0.1:4222: ...").
Result<std::unique_ptr<EventPlane>> MakeEventPlane(EventPlaneOptions options);

}  // namespace tandem::runtime
