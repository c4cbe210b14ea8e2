// The event plane on NATS (event_plane.h), for clusters: core NATS publish/subscribe through
// libnats, the NATS C client (Debian libnats-dev; docs.nats.io "Developing with NATS", and
// nats.c's nats.h). Built when CMake finds libnats through pkg-config (TANDEM_HAVE_NATS).
//
//   one connection per plane to options.url ("nats://host:port", default port 4222), connect
//   timeout options.timeout; it reconnects by itself (every 250 ms, forever) and re-subscribes.
//   Publish   frames the event (EncodeEventFrame: worker id, sequence number per subject, payload)
//             and publishes it on the subject. While disconnected it fails at once with
//             FailedPrecondition naming the URL; the sequence number is spent all the same, so
//             subscribers see the loss as a gap.
//   Subscribe a NATS subscription on the subject; the handlers run on its delivery thread (one
//             per subscription: calls never overlap). The subscription is known to the server
//             (flushed) before Subscribe returns. status(): OK while connected.
// Delivery is at most once (core NATS); what is lost shows as a gap at the next event.
#pragma once

#include <memory>

#include "events/event_plane.h"

namespace tandem::runtime {

// FailedPrecondition "nats://127.0.0.1:4222: <libnats error>" when the server cannot be reached.
Result<std::unique_ptr<EventPlane>> MakeNatsEventPlane(EventPlaneOptions options);

}  // namespace tandem::runtime
