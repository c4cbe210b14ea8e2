// The embedded event plane (event_plane.h): nothing to install.
//
//   Publish    appends to the worker's EventRing (EventPlaneOptions::ring), which its own gRPC
//              server serves (WorkerServerOptions::events, Worker.SubscribeEvents).
//   Subscribe  watches discovery (options.discovery, namespace, components; polling every
//              discovery_interval) and keeps one Worker.SubscribeEvents stream per live worker
//              with an endpoint. A broken stream reconnects (backoff 100 ms doubling to 2 s) from
//              the next sequence number it expects, in the same worker incarnation (epoch); the
//              ring replays what it still holds, and anything older shows as a gap. A worker that
//              leaves discovery has its stream closed; one that restarts starts again at 1 (a gap
//              with received < expected).
//   status()   OK when every stream is connected; else the last failure, naming the worker and its
//              endpoint.
#pragma once

#include <memory>

#include "events/event_plane.h"

namespace tandem::runtime {

// Errors: FailedPrecondition when neither a ring (to publish) nor a discovery (to subscribe) is
// given. Publish without a ring or worker id, or Subscribe without a discovery: FailedPrecondition.
Result<std::unique_ptr<EventPlane>> MakeEmbeddedEventPlane(EventPlaneOptions options);

}  // namespace tandem::runtime
