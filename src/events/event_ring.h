// EventRing: a worker's recent events, per subject, for the embedded event plane. Publish appends
// (sequence numbers per subject from 1) and hands the event to every listener; the ring keeps the
// last `capacity` events of each subject so that a subscriber that reconnects replays what it
// missed (Worker.SubscribeEvents with from_sequence; older ones are gone: the subscriber sees a gap).
// Thread-safe; listeners are called under the ring's lock, in sequence order, and must not block
// or call back into the ring; a listener that returns false is removed. epoch() is random per ring
// (a worker incarnation), so that a subscriber tells a restarted worker from a reconnect.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "events/event_plane.h"

namespace tandem::runtime {

class EventRing {
 public:
  using Listener = std::function<bool(const Event&)>;  // false: remove this listener

  explicit EventRing(size_t capacity = 4096);

  // Appends the next event of `subject` from `worker_id`; returns its sequence number.
  uint64_t Publish(const std::string& subject, const std::string& worker_id, std::string_view payload);

  // Atomically: calls `listener` with the retained events of `subject` whose sequence is >=
  // from_sequence (in order), then registers it for every later one. Returns its id.
  uint64_t Listen(const std::string& subject, uint64_t from_sequence, Listener listener);
  void RemoveListener(uint64_t id);

  uint64_t epoch() const { return epoch_; }
  uint64_t last_sequence(const std::string& subject) const;
  size_t num_listeners() const;

 private:
  struct SubjectLog {
    uint64_t next_sequence = 1;
    std::deque<Event> events;
  };
  struct ListenerEntry {
    std::string subject;
    Listener listener;
  };
  const size_t capacity_;
  const uint64_t epoch_;
  mutable std::mutex mu_;
  std::map<std::string, SubjectLog> logs_;
  std::map<uint64_t, ListenerEntry> listeners_;
  uint64_t next_listener_id_ = 1;
};

}  // namespace tandem::runtime
