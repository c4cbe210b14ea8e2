#include "worker/kv_event_publisher.h"

#include <future>
#include <utility>

#include "common/logging.h"
#include "events/kv_event_codec.h"

namespace tandem::worker {

KvEventPublisher::KvEventPublisher(KvEventPublisherOptions options)
    : options_(std::move(options)),
      queue_(std::make_shared<KvEventQueue>(options_.max_queued_events)) {}

KvEventPublisher::~KvEventPublisher() { Stop(); }

void KvEventPublisher::AttachEngine(std::weak_ptr<AsyncEngine> engine) {
  std::lock_guard<std::mutex> lock(mu_);
  engine_ = std::move(engine);
}

void KvEventPublisher::Start(std::shared_ptr<runtime::EventPlane> plane, std::string worker_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (plane_ || thread_.joinable()) return;
    plane_ = std::move(plane);
    worker_id_ = std::move(worker_id);
  }
  thread_ = std::thread([this] { Loop(); });
}

void KvEventPublisher::Stop() {
  if (stop_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::Loop() {
  while (!stop_.load()) {
    KvEventQueue::Drained d = queue_->Drain(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> lock(mu_);
    counters_.events_dropped += d.num_dropped_events;
    PublishLocked(std::move(d.events), d.load, d.has_load);
  }
  KvEventQueue::Drained d = queue_->Drain();  // what is left
  std::lock_guard<std::mutex> lock(mu_);
  counters_.events_dropped += d.num_dropped_events;
  PublishLocked(std::move(d.events), d.load, d.has_load);
}

void KvEventPublisher::PublishLocked(std::vector<KvEvent> events, const KvLoad& load,
                                     bool has_load) {
  if (!plane_) return;
  KvEventBatch batch;
  batch.load = has_load ? load : last_load_;
  if (events.empty() && (!has_load || (load_published_ && load == last_load_))) return;
  batch.events = std::move(events);
  Result<uint64_t> seq = plane_->Publish(options_.subject, runtime::EncodeKvEventBatch(batch));
  if (!seq.ok()) {
    if (counters_.publish_errors++ == 0) {
      log::warn("KV events: publishing failed ({} events lost; later ones still tried): {}",
                batch.events.size(), seq.status().ToString());
    }
    return;
  }
  last_load_ = batch.load;
  load_published_ = true;
  counters_.batches_published++;
  counters_.events_published += batch.events.size();
  counters_.last_sequence = *seq;
}

runtime::SnapshotProvider KvEventPublisher::snapshot_provider() {
  return [this](const std::string& subject) { return Snapshot(subject); };
}

Result<runtime::EventSnapshot> KvEventPublisher::Snapshot(const std::string& subject) {
  if (subject != options_.subject) {
    return Err(StatusCode::kNotFound, "this worker publishes '{}', not '{}'", options_.subject,
               subject);
  }
  std::lock_guard<std::mutex> lock(mu_);  // nothing is published while the snapshot is taken
  std::shared_ptr<AsyncEngine> engine = engine_.lock();
  if (!engine) return Status(StatusCode::kFailedPrecondition, "no engine to snapshot");
  std::future<Result<KvCacheSnapshot>> future = engine->SnapshotCachedBlocks();
  if (future.wait_for(options_.snapshot_timeout) != std::future_status::ready) {
    return Err(StatusCode::kFailedPrecondition, "the engine did not answer the snapshot within {} ms",
               options_.snapshot_timeout.count());
  }
  Result<KvCacheSnapshot> snapshot = future.get();
  if (!snapshot.ok()) return snapshot.status();
  // What the engine flushed before snapshotting (ids <= L) goes out now, at sequences <= S; what it
  // queued after (ids > L) in the batch after.
  KvEventQueue::Drained d = queue_->Drain();
  counters_.events_dropped += d.num_dropped_events;
  std::vector<KvEvent> older, newer;
  for (KvEvent& e : d.events) {
    (e.event_id <= snapshot->last_event_id ? older : newer).push_back(std::move(e));
  }
  if (!older.empty()) PublishLocked(std::move(older), snapshot->load, true);
  runtime::EventSnapshot out;
  out.worker_id = worker_id_;
  out.sequence = counters_.last_sequence;
  out.payload = runtime::EncodeKvCacheSnapshot(*snapshot);
  if (!newer.empty() || d.has_load) PublishLocked(std::move(newer), d.load, d.has_load);
  return out;
}

KvEventPublisher::Counters KvEventPublisher::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace tandem::worker
