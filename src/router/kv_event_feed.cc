#include "router/kv_event_feed.h"

#include <algorithm>

namespace tandem::runtime {

Result<std::shared_ptr<KvEventFeed>> KvEventFeed::Create(std::shared_ptr<EventPlane> plane,
                                                         const std::string& namespace_name) {
  if (!plane) return Status(StatusCode::kInvalidArgument, "KV event feed: no event plane");
  auto feed = std::make_shared<KvEventFeed>(std::move(plane), KvEventsSubject(namespace_name));
  KvEventFeed* self = feed.get();  // the subscription ends in ~KvEventFeed, before `self` goes
  EventHandlers handlers;
  handlers.on_event = [self](const Event& e) { self->OnEvent(e); };
  handlers.on_gap = [self](const EventGap& g) { self->OnGap(g); };
  TANDEM_ASSIGN_OR_RETURN(feed->subscription_,
                          feed->plane_->Subscribe(feed->subject_, std::move(handlers)));
  return feed;
}

KvEventFeed::KvEventFeed(std::shared_ptr<EventPlane> plane, std::string subject)
    : plane_(std::move(plane)), subject_(std::move(subject)) {}

KvEventFeed::~KvEventFeed() { subscription_.reset(); }  // no handler call after this

void KvEventFeed::Attach(KvEventSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(sinks_.begin(), sinks_.end(), sink) == sinks_.end()) sinks_.push_back(sink);
}

void KvEventFeed::Detach(KvEventSink* sink) {
  std::lock_guard<std::mutex> lock(mu_);
  sinks_.erase(std::remove(sinks_.begin(), sinks_.end(), sink), sinks_.end());
}

KvEventFeed::Counters KvEventFeed::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void KvEventFeed::OnEvent(const Event& event) {
  const Result<KvEventBatch> batch = DecodeKvEventBatch(event.payload);
  std::lock_guard<std::mutex> lock(mu_);
  counters_.batches++;
  bool claimed = false;
  for (KvEventSink* sink : sinks_) {
    if (!sink->HoldsWorker(event.worker_id)) continue;
    claimed = true;
    counters_.deliveries++;
    sink->OnKvEvents(event, batch);
  }
  if (!claimed) counters_.unclaimed++;
}

void KvEventFeed::OnGap(const EventGap& gap) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.gaps++;
  for (KvEventSink* sink : sinks_) {
    if (sink->HoldsWorker(gap.worker_id)) sink->OnKvGap(gap);
  }
}

}  // namespace tandem::runtime
