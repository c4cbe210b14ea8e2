// KV events: what an engine's prefix cache gained and lost, for the KV-aware router (DESIGN.md
// section 4; the shape of Dynamo's KvCacheEvent / KvCacheEventData).
//
//   stored{parent_hash, [block_hash]}  full blocks became findable under these chained hashes
//                                      (block_hash.h), in chain order: block_hashes[0]'s parent is
//                                      parent_hash (0 for a prompt's first block), block_hashes[i]'s
//                                      is block_hashes[i-1].
//   removed{[block_hash]}              these hashes were evicted (no longer findable).
//   cleared{}                          nothing is cached in the KV pool any more (the tiers
//                                      below it keep their blocks).
// stored and removed name a tier (issue 26): the device pool (the default, left out of the JSON),
// the host tier or the disk tier below it (kvtier/). A block may be in several tiers at once; the
// router weighs a host or disk hit below a pool hit (router/kv_router.h).
//
// Every event carries a per-worker sequence number `event_id`: 1 for the first event an engine
// publishes, then +1 per event with no holes. A consumer that sees event_id jump has lost events and
// must resync from a snapshot (KvCacheSnapshot: every cached block and the last event_id it
// includes). Events are published once per engine step (KvEventBatch), with the engine's load.
//
// Serializable: ToJson / KvEventFromJson (and the batch and snapshot) for an event plane.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem {

// Where a block is: the KV pool (GPU or CPU engine memory), the host tier, the disk tier.
enum class KvTier : uint8_t { kDevice = 0, kHost = 1, kDisk = 2 };
inline constexpr int kNumKvTiers = 3;
const char* KvTierName(KvTier tier);  // "device", "host", "disk"

struct KvStoredEvent {
  uint64_t parent_hash = 0;
  std::vector<uint64_t> block_hashes;
  KvTier tier = KvTier::kDevice;
  bool operator==(const KvStoredEvent&) const = default;
};
struct KvRemovedEvent {
  std::vector<uint64_t> block_hashes;
  KvTier tier = KvTier::kDevice;
  bool operator==(const KvRemovedEvent&) const = default;
};
struct KvClearedEvent {
  bool operator==(const KvClearedEvent&) const = default;
};

struct KvEvent {
  uint64_t event_id = 0;  // per-worker sequence number, from 1
  std::variant<KvStoredEvent, KvRemovedEvent, KvClearedEvent> data;
  bool operator==(const KvEvent&) const = default;
};

// An engine's load after a step (blocks of its KV pool, requests of its scheduler).
struct KvLoad {
  int num_active_blocks = 0;  // blocks referenced by live requests (EngineStats::num_kv_blocks_used)
  int num_total_blocks = 0;
  int num_waiting = 0;        // requests waiting for admission
  int num_running = 0;        // running requests (including those awaiting remote KV)
  bool operator==(const KvLoad&) const = default;
};

// What one engine step publishes: the events since the previous batch (possibly none) and the load.
struct KvEventBatch {
  std::vector<KvEvent> events;
  KvLoad load;
};

// One cached block of a snapshot.
struct KvCachedBlock {
  uint64_t block_hash = 0;
  uint64_t parent_hash = 0;  // 0: a prompt's first block
  KvTier tier = KvTier::kDevice;
  bool operator==(const KvCachedBlock&) const = default;
};

// Every block an engine has cached (findable by hash: in use or free; and its tiers' blocks, each
// with its tier), consistent with the event
// stream up to and including last_event_id (0: before any event).
struct KvCacheSnapshot {
  uint64_t last_event_id = 0;
  std::vector<KvCachedBlock> blocks;  // in block id order
  KvLoad load;
};

// Receives the engine's batches. OnStep runs on the engine's thread once per step and must not
// block (KvEventQueue below is a bounded hand-off to another thread).
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual void OnStep(KvEventBatch batch) = 0;
};

// Collects events inside the engine (BlockPool and KVCacheManager record into it) and numbers them
// when taken. Merges consecutive records: a stored block whose parent is the last stored block
// extends that event; removes following removes form one event. Not thread-safe (engine thread).
class KvEventRecorder {
 public:
  void Stored(uint64_t parent_hash, uint64_t block_hash, KvTier tier = KvTier::kDevice);
  void Removed(uint64_t block_hash, KvTier tier = KvTier::kDevice);
  void Cleared();  // drops what is pending (it is superseded) and records cleared{}
  bool empty() const { return pending_.empty(); }
  // The pending events with their event_ids assigned (consecutive, after the last taken one).
  std::vector<KvEvent> Take();
  uint64_t last_event_id() const { return next_event_id_ - 1; }  // of the events taken so far

 private:
  std::vector<KvEvent> pending_;
  uint64_t next_event_id_ = 1;
};

// A bounded, thread-safe hand-off from the engine thread to a consumer thread. OnStep never waits
// for the consumer: when the queued events would exceed max_events, the batch's events are dropped
// (counted in num_dropped_events); the consumer sees the hole in event_ids and resyncs. The load
// is never dropped: the latest one replaces the previous.
class KvEventQueue final : public KvEventSink {
 public:
  explicit KvEventQueue(size_t max_events = 1 << 16) : max_events_(max_events) {}
  void OnStep(KvEventBatch batch) override;

  struct Drained {
    std::vector<KvEvent> events;  // in event_id order, possibly with holes after drops
    KvLoad load;
    bool has_load = false;        // a batch arrived since the last Drain
    uint64_t num_dropped_events = 0;  // dropped since the last Drain
  };
  // Takes everything queued; waits up to `timeout` for something when the queue is empty.
  Drained Drain(std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  uint64_t total_dropped_events() const;

 private:
  const size_t max_events_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<KvEvent> events_;
  KvLoad load_;
  bool has_load_ = false;
  uint64_t dropped_ = 0, total_dropped_ = 0;
};

// JSON: {"event_id":N,"data":{"stored":{"parent_hash":P,"block_hashes":[...]}}} |
// {"data":{"removed":{"block_hashes":[...]}}} | {"data":{"cleared":{}}} (Dynamo's field names);
// hashes as unsigned 64-bit numbers.
nlohmann::json ToJson(const KvEvent& event);
Result<KvEvent> KvEventFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const KvLoad& load);
Result<KvLoad> KvLoadFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const KvCacheSnapshot& snapshot);
Result<KvCacheSnapshot> KvCacheSnapshotFromJson(const nlohmann::json& j);

}  // namespace tandem
