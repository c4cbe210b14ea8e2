#include "events/event_ring.h"

#include <random>

namespace tandem::runtime {

EventRing::EventRing(size_t capacity)
    : capacity_(capacity ? capacity : 1), epoch_([] {
        std::random_device rd;
        return ((static_cast<uint64_t>(rd()) << 32) | rd()) | 1;  // never 0 ("unknown")
      }()) {}

uint64_t EventRing::Publish(const std::string& subject, const std::string& worker_id,
                            std::string_view payload) {
  std::lock_guard<std::mutex> lock(mu_);
  SubjectLog& log = logs_[subject];
  Event event{subject, worker_id, log.next_sequence++, std::string(payload)};
  for (auto it = listeners_.begin(); it != listeners_.end();) {
    if (it->second.subject == subject && !it->second.listener(event)) {
      it = listeners_.erase(it);
    } else {
      ++it;
    }
  }
  log.events.push_back(std::move(event));
  if (log.events.size() > capacity_) log.events.pop_front();
  return log.next_sequence - 1;
}

uint64_t EventRing::Listen(const std::string& subject, uint64_t from_sequence, Listener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = logs_.find(subject); it != logs_.end()) {
    for (const Event& e : it->second.events) {
      if (e.sequence >= from_sequence && !listener(e)) return 0;
    }
  }
  const uint64_t id = next_listener_id_++;
  listeners_[id] = ListenerEntry{subject, std::move(listener)};
  return id;
}

void EventRing::RemoveListener(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  listeners_.erase(id);
}

uint64_t EventRing::last_sequence(const std::string& subject) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = logs_.find(subject);
  return it == logs_.end() ? 0 : it->second.next_sequence - 1;
}

size_t EventRing::num_listeners() const {
  std::lock_guard<std::mutex> lock(mu_);
  return listeners_.size();
}

}  // namespace tandem::runtime
