// The event plane: workers publish events (KV blocks stored/removed/cleared, load; DESIGN.md
// section 4) and routers subscribe. Events are opaque byte batches here; each carries the
// publishing worker's id and a sequence number per (worker, subject) starting at 1, so that a
// subscriber notices what it missed and resyncs from the snapshot the worker serves (the Snapshot
// RPC of tandem.proto, FetchSnapshot below).
//
// Implementations (MakeEventPlane, in rpc/event_plane_factory.h):
//   embedded (default, nothing to install)  each worker keeps its recent events in a ring
//       (event_ring.h) served by its own gRPC server (Worker.SubscribeEvents); a subscriber finds
//       the workers through discovery and streams from each (rpc/embedded_event_plane.h).
//   nats://host:port  NATS core publish/subscribe (libnats, the NATS C client; nats_event_plane.h;
//       built when pkg-config finds libnats). Messages are framed by EncodeEventFrame.
// Delivery is at most once: a lost connection loses events, which the sequence numbers reveal.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace tandem::runtime {

class Discovery;
class EventRing;

struct Event {
  std::string subject;    // [A-Za-z0-9._-]+, e.g. KvEventsSubject("tandem")
  std::string worker_id;  // the publisher's discovery instance id
  uint64_t sequence = 0;  // per (worker_id, subject): 1, 2, 3, ...
  std::string payload;    // opaque bytes (the engine's encoded event batch)
};

// A subscriber missed events of one worker: it expected `expected` and got `received`.
// received > expected: events expected..received-1 were lost (a slow or disconnected subscriber,
// a ring that moved past them, a subscriber that joined late: expected = 1).
// received < expected: the worker started counting again (it restarted).
// Either way, resync that worker from its snapshot.
struct EventGap {
  std::string subject;
  std::string worker_id;
  uint64_t expected = 0;
  uint64_t received = 0;
};

struct EventHandlers {
  std::function<void(const Event&)> on_event;    // required
  std::function<void(const EventGap&)> on_gap;   // optional; called before the event that revealed it
};

// A live subscription; destroying it stops delivery (no handler call after the destructor).
class Subscription {
 public:
  virtual ~Subscription() = default;
  // OK while connected; otherwise why not (e.g. "nats://127.0.0.1:4222: disconnected").
  virtual Status status() const = 0;
};

class EventPlane {
 public:
  virtual ~EventPlane() = default;
  // Publishes `payload` as the next event of this worker on `subject`; returns its sequence
  // number. Does not block on the network. Errors: InvalidArgument (bad subject), FailedPrecondition
  // (no worker id, or the plane cannot deliver now: e.g. NATS disconnected, naming its URL).
  virtual Result<uint64_t> Publish(const std::string& subject, std::string_view payload) = 0;
  // Calls `handlers` for every event on `subject`, from every worker. Calls of one subscription
  // never overlap; one worker's events come in sequence order.
  virtual Result<std::unique_ptr<Subscription>> Subscribe(const std::string& subject,
                                                          EventHandlers handlers) = 0;
  // Waits until what this plane published has reached the server (NATS: a PING/PONG round trip;
  // embedded: at once, the ring holds it). FailedPrecondition naming the URL on a timeout.
  virtual Status Flush(std::chrono::milliseconds timeout) = 0;
  virtual std::string url() const = 0;  // "embedded" or "nats://host:port"
};

struct EventPlaneOptions {
  std::string url;        // "" / "embedded", or "nats://host:port" (port default 4222)
  std::string worker_id;  // publishers: this worker's instance id (else Publish fails)
  // embedded, publishers: the ring the worker's gRPC server serves (WorkerServerOptions::events).
  std::shared_ptr<EventRing> ring;
  // embedded, subscribers: where the workers are (discovery, namespace and the components whose
  // instances publish).
  std::shared_ptr<Discovery> discovery;
  std::string namespace_name = "tandem";
  std::vector<std::string> components = {"agg", "prefill", "decode"};
  std::chrono::milliseconds discovery_interval{500};  // embedded: how often workers are listed
  std::chrono::milliseconds timeout{2000};            // connecting (NATS) / RPC deadlines
};

// InvalidArgument for an unknown URL, or nats:// in a build without libnats (MakeEventPlane checks).
Status ValidateEventPlaneUrl(const std::string& url);

// The subject of a namespace's KV events ("<namespace>.kv_events").
std::string KvEventsSubject(const std::string& namespace_name);
bool ValidSubject(const std::string& subject);

// A worker's state for one subject, at sequence number `sequence` (events after it follow).
struct EventSnapshot {
  std::string worker_id;
  uint64_t sequence = 0;
  std::string payload;
};
// Served by a worker's Worker.Snapshot RPC (WorkerServerOptions::snapshot); the engine side fills
// it. It must return a payload and sequence that agree (taken under the lock that publishes).
using SnapshotProvider = std::function<Result<EventSnapshot>(const std::string& subject)>;
// Asks the worker at `endpoint` ("host:port") for its snapshot. Errors: FailedPrecondition naming
// the endpoint (unreachable, deadline, no provider).
Result<EventSnapshot> FetchSnapshot(const std::string& endpoint, const std::string& subject,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(5));

// ---- shared by the implementations ----

// Wire frame of one event (NATS message body), little-endian:
//   u8 version = 1 | u16 worker_id length | worker_id | u64 sequence | payload (the rest)
std::string EncodeEventFrame(const std::string& worker_id, uint64_t sequence, std::string_view payload);
// DataLoss for a short or unknown frame.
Result<Event> DecodeEventFrame(const std::string& subject, std::string_view frame);

// Per-worker sequence tracking of one subscription: Check returns the gap `event` reveals, if any,
// and advances. Not thread-safe (one per subscription, under its lock).
class GapDetector {
 public:
  std::optional<EventGap> Check(const Event& event);
  void Forget(const std::string& worker_id) { last_.erase(worker_id); }
  // The last sequence seen from `worker_id` (0: none).
  uint64_t Last(const std::string& worker_id) const;

 private:
  std::unordered_map<std::string, uint64_t> last_;
};

}  // namespace tandem::runtime
