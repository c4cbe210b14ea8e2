// KvEventPublisher: a worker's KV events and load, out on the event plane (DESIGN.md section 4),
// and the snapshot its Worker.Snapshot RPC serves.
//
//   sink()     a KvEventQueue (kv_events.h) to set as AsyncEngineOptions::kv_event_sink. The engine
//              hands it each step's events and load without blocking.
//   Start()    a thread drains the queue and publishes each drained batch as one plane event on
//              `subject` (KvEventsSubject(namespace)), payload EncodeKvEventBatch
//              (events/kv_event_codec.h): the events (event_id order, possibly empty) and the
//              latest load. A batch with no events whose load equals the last one published is
//              skipped. A failed Publish (e.g. NATS down) loses that batch: the router sees the
//              hole in event_ids and resyncs from the snapshot.
//   snapshot_provider()  (the publisher must outlive the server serving it) for WorkerServerOptions::snapshot: the engine's KvCacheSnapshot
//              (AsyncEngine::SnapshotCachedBlocks, AttachEngine first), payload
//              EncodeKvCacheSnapshot; NotFound for another subject, FailedPrecondition without an
//              engine or when the engine does not answer within snapshot_timeout.
//
// Consistency of a snapshot (last_event_id L, plane sequence S) with the stream: the snapshot holds
// exactly the events with event_id <= L (the engine flushes its pending events into the queue
// before it snapshots). The provider publishes under the publishing lock: what the queue holds
// after the snapshot is split, events <= L in a batch with sequence <= S, events > L in the batches
// after; so every event with event_id > L is published with a sequence > S. Events <= L may still
// arrive after S (drained before the snapshot, published after it): a consumer drops them by
// event_id, as KvRouter does. Applying the snapshot, then the events newer than L, is exact.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/async_engine.h"
#include "engine/kv_events.h"
#include "events/event_plane.h"

namespace tandem::worker {

struct KvEventPublisherOptions {
  std::string subject = "tandem.kv_events";        // runtime::KvEventsSubject(namespace)
  size_t max_queued_events = 1 << 16;              // the queue's bound (then events are dropped)
  std::chrono::milliseconds snapshot_timeout{5000};
};

class KvEventPublisher {
 public:
  explicit KvEventPublisher(KvEventPublisherOptions options);
  ~KvEventPublisher();  // Stop()

  std::shared_ptr<KvEventSink> sink() const { return queue_; }
  // The engine the snapshots come from (kept as a weak reference).
  void AttachEngine(std::weak_ptr<AsyncEngine> engine);
  // Starts publishing on `plane` as `worker_id` (the plane's publisher id, also the snapshot's);
  // what was queued before is published first. Once.
  void Start(std::shared_ptr<runtime::EventPlane> plane, std::string worker_id);
  // Publishes what is queued and stops the thread. Idempotent.
  void Stop();
  runtime::SnapshotProvider snapshot_provider();

  struct Counters {
    uint64_t batches_published = 0;
    uint64_t events_published = 0;
    uint64_t publish_errors = 0;      // batches lost to a failed Publish
    uint64_t events_dropped = 0;      // by the queue (it was full)
    uint64_t last_sequence = 0;       // of the last batch published
  };
  Counters counters() const;

 private:
  void Loop();
  // Publishes `events` with `load` (mu_ held). Skips a load-only batch with an unchanged load.
  void PublishLocked(std::vector<KvEvent> events, const KvLoad& load, bool has_load);
  Result<runtime::EventSnapshot> Snapshot(const std::string& subject);

  const KvEventPublisherOptions options_;
  std::shared_ptr<KvEventQueue> queue_;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable std::mutex mu_;  // the publishing lock
  std::shared_ptr<runtime::EventPlane> plane_;
  std::string worker_id_;
  std::weak_ptr<AsyncEngine> engine_;
  KvLoad last_load_;
  bool load_published_ = false;
  Counters counters_;
};

}  // namespace tandem::worker
