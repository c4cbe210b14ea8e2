// KvEventFeed: the frontend's one subscription to a namespace's KV events (KvEventsSubject on the
// event plane), shared by its routers: the decode pool's KvRouting and the prefill pool's
// (kv_routing.h, prefill_router.h; issue 8). Without it each router subscribed to the whole
// subject and every worker's events reached the frontend twice.
//
//   events   each plane event is decoded once (DecodeKvEventBatch, kv_event_codec.h) and handed
//            to every attached sink that holds the publishing worker (HoldsWorker: normally
//            exactly one, the router whose pool the worker is in), with the decode error if it
//            did not decode. A worker no sink holds: dropped (a sink resyncs a worker from its
//            snapshot when it joins, which covers what it missed).
//   gaps     the plane's EventGap goes to the sinks holding that worker, like its events.
//   sinks    Attach / Detach; calls to sinks never overlap (the plane's thread, under the feed's
//            lock), and none reaches a sink after its Detach returns. A sink must not call the
//            feed from its handlers.
// Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "events/event_plane.h"
#include "events/kv_event_codec.h"

namespace tandem::runtime {

class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual bool HoldsWorker(const std::string& worker_id) const = 0;
  // `batch`: the decoded payload of `event`, or DataLoss / InvalidArgument why not.
  virtual void OnKvEvents(const Event& event, const Result<KvEventBatch>& batch) = 0;
  virtual void OnKvGap(const EventGap& gap) = 0;
};

class KvEventFeed {
 public:
  // Subscribes to KvEventsSubject(namespace_name) on `plane` (required). Errors: InvalidArgument
  // for a null plane; the plane's Subscribe errors.
  static Result<std::shared_ptr<KvEventFeed>> Create(std::shared_ptr<EventPlane> plane,
                                                     const std::string& namespace_name);
  ~KvEventFeed();  // unsubscribes
  KvEventFeed(const KvEventFeed&) = delete;
  KvEventFeed& operator=(const KvEventFeed&) = delete;

  void Attach(KvEventSink* sink);  // not owned: Detach it before destroying it
  void Detach(KvEventSink* sink);  // waits for a call to it in progress

  const std::string& subject() const { return subject_; }
  std::string url() const { return plane_->url(); }

  struct Counters {
    uint64_t batches = 0;      // plane events received (each decoded once)
    uint64_t deliveries = 0;   // batches handed to a sink (one per holding sink)
    uint64_t unclaimed = 0;    // batches no sink held the worker of
    uint64_t gaps = 0;
  };
  Counters counters() const;

  KvEventFeed(std::shared_ptr<EventPlane> plane, std::string subject);  // use Create

 private:
  void OnEvent(const Event& event);
  void OnGap(const EventGap& gap);

  const std::shared_ptr<EventPlane> plane_;
  const std::string subject_;
  mutable std::mutex mu_;  // held while calling sinks
  std::vector<KvEventSink*> sinks_;
  Counters counters_;
  std::unique_ptr<Subscription> subscription_;
};

}  // namespace tandem::runtime
