// KvRouter: picks a worker of one pool (the decode workers, or the prefill workers: one router per
// pool) for a prompt, from the workers' KV events and load (DESIGN.md section 4; Dynamo's KvRouter,
// KvScheduler and ActiveSequences).
//
// Cost of worker w for a prompt of P full blocks (block_hash.h), in blocks:
//   cost_w = overlap_weight * prefill_blocks_w + decode_blocks_w
//   prefill_blocks_w = (P - overlap_w) + blocks w is already prefilling (predicted, below)
//   decode_blocks_w  = the active KV blocks w last reported + blocks routed to w since that report
// overlap_w: the leading prompt blocks w has cached in its KV pool (KvIndex). With KV tiers below
// the pool (issue 26: KV events naming the host or disk tier), the prompt's next blocks that w's
// host tier holds, then those its disk tier holds (the order of the engine's own lookup,
// KVCacheManager::FindCachedPrefix), count host_hit_weight and disk_hit_weight of a block each:
//   prefill_blocks_w = (P - overlap_w - host_hit_weight * host_w - disk_hit_weight * disk_w) + ...
// (a tier hit costs a copy instead of a recompute; the defaults put it below a pool hit). Modes:
//   kv           temperature 0: the least cost; ties: the least decode_blocks, then uniformly at
//                random. Temperature T > 0: w with probability proportional to
//                exp(-(cost_w - c_min) / ((c_max - c_min) * T)) (uniform when all costs are equal).
//   round-robin  the routable workers in worker id order, one after the other.
//   random       uniformly.
// Every mode reports the chosen worker's overlap and cost.
//
// Predicted load (Dynamo's ActiveSequences): a decision made with a request id adds the request's
// uncached blocks to the worker's prefill blocks until MarkPrefillDone (or Free), and its prompt
// blocks to the worker's decode blocks until the worker's next load report (UpdateLoad) supersedes
// them or Free.
//
// Events: per worker, events apply in event_id order from 1 (a fresh worker) or from a snapshot's
// last_event_id + 1. Lower ids are stale (ignored). A higher id is a gap: the worker's events are
// buffered (bounded) and ApplyEvents answers needs_snapshot until ApplySnapshot, which replaces the
// worker's blocks and replays the buffered events newer than the snapshot. A snapshot older than
// the events the worker already applied in order (no gap pending) is ignored (stale_snapshot):
// those events are not buffered, so replacing the blocks would lose them for good.
//
// Routable: decisions choose among the routable workers only. A worker is routable when added;
// SetRoutable(id, false) takes it out of the choice (e.g. the frontend cannot reach it until its
// next health check) while its blocks, events, load and predictions stay as they are.
//
// Worker ids are strings (discovery's instance ids). Thread-safe: every method takes one mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/kv_events.h"
#include "router/kv_index.h"

namespace tandem::router {

enum class RouterMode { kKv, kRoundRobin, kRandom };
const char* RouterModeName(RouterMode mode);  // "kv", "round-robin", "random"
// InvalidArgument naming the accepted values.
Result<RouterMode> ParseRouterMode(std::string_view name);

struct KvRouterConfig {
  RouterMode mode = RouterMode::kKv;
  double overlap_weight = 1.0;  // >= 0
  double temperature = 0.0;     // >= 0
  int block_size = 16;          // tokens per block, for Route(tokens)
  uint64_t seed = 0;            // 0: from std::random_device
  int expected_workers = 64;    // initial width of the index's bitsets (grows)
  size_t expected_blocks = 1 << 16;  // initial index size (grows)
  size_t max_buffered_events = 1 << 16;  // per worker, while it awaits a snapshot
  double host_hit_weight = 0.8;  // a block found in a worker's host tier, in [0, 1]
  double disk_hit_weight = 0.5;  // in its disk tier, in [0, 1]
};

struct RoutingDecision {
  std::string worker_id;
  int num_prompt_blocks = 0;
  int overlap_blocks = 0;    // leading prompt blocks the chosen worker has cached
  double cost = 0.0;         // the chosen worker's cost
  int prefill_blocks = 0;    // its prefill_blocks term (blocks outside its KV pool)
  int decode_blocks = 0;     // its decode_blocks term
  int tier_blocks = 0;       // of the prefill blocks, those its host or disk tier holds
  double tier_credit = 0.0;  // their weighted count, taken off prefill_blocks in the cost
};

struct ApplyEventsResult {
  int num_applied = 0;
  int num_stale = 0;            // ids already applied: ignored
  int num_buffered = 0;         // kept until a snapshot
  bool needs_snapshot = false;  // a gap: call ApplySnapshot for this worker
  bool stale_snapshot = false;  // ApplySnapshot: older than the events applied, ignored
};

// One worker as the router sees it.
struct RouterWorkerState {
  std::string worker_id;
  size_t num_cached_blocks = 0;  // in the index
  KvLoad load;                   // last reported
  int64_t predicted_prefill_blocks = 0;
  int64_t predicted_decode_blocks = 0;  // routed since the last load report
  uint64_t next_event_id = 1;
  bool needs_snapshot = false;
  bool routable = true;  // SetRoutable
};

// Transparent string hash: maps keyed by std::string, looked up by std::string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class KvRouter {
 public:
  // InvalidArgument for a negative overlap_weight / temperature, block_size < 1, or a tier hit
  // weight outside [0, 1].
  static Result<std::unique_ptr<KvRouter>> Create(const KvRouterConfig& config);
  explicit KvRouter(const KvRouterConfig& config);  // the config must be valid

  // Adds a worker (expecting its events from event_id 1). InvalidArgument for an empty id,
  // FailedPrecondition for a known one.
  Status AddWorker(std::string_view worker_id);
  // Forgets the worker: its blocks leave the index, its predictions go. Unknown ids: no-op.
  void RemoveWorker(std::string_view worker_id);
  bool HasWorker(std::string_view worker_id) const;
  int num_workers() const;  // every added worker, routable or not
  // Puts the worker into (true) or takes it out of (false) the choice of Route; a no-op when it
  // already is. NotFound for an unknown worker.
  Status SetRoutable(std::string_view worker_id, bool routable);

  // NotFound for an unknown worker.
  Result<ApplyEventsResult> ApplyEvents(std::string_view worker_id, std::span<const KvEvent> events);
  Result<ApplyEventsResult> ApplySnapshot(std::string_view worker_id,
                                          const KvCacheSnapshot& snapshot);
  // The worker's load report; supersedes the decode blocks predicted since the last one.
  Status UpdateLoad(std::string_view worker_id, const KvLoad& load);

  // Chooses a worker for a prompt given its full-block hashes (ComputeBlockHashes with the
  // engine's block size). A non-empty request_id records the predicted load (then MarkPrefillDone
  // and Free it). FailedPrecondition when no worker is routable; InvalidArgument for a request id
  // already routed. `decision` is reused: no allocation once its worker_id has room.
  Status Route(std::span<const uint64_t> block_hashes, RoutingDecision* decision,
               std::string_view request_id = {});
  Result<RoutingDecision> Route(std::span<const uint64_t> block_hashes,
                                std::string_view request_id = {});
  // The same from token ids (hashes computed here with config.block_size).
  Result<RoutingDecision> RouteTokens(std::span<const int32_t> token_ids,
                                      std::string_view request_id = {});
  // The routed request's prompt is computed: its blocks stop counting as prefill.
  void MarkPrefillDone(std::string_view request_id);
  // The routed request ended (any way): its predictions go. Unknown ids: no-op.
  void Free(std::string_view request_id);

  // overlap per worker id for these hashes (what Route sees), for tests and metrics.
  std::vector<std::pair<std::string, int>> Overlaps(std::span<const uint64_t> block_hashes) const;
  std::vector<RouterWorkerState> Workers() const;  // sorted by worker id
  size_t num_indexed_blocks() const;
  const KvRouterConfig& config() const { return config_; }

 private:
  struct Worker {
    std::string id;
    bool live = false;
    bool routable = true;
    uint64_t generation = 0;       // bumped when the slot is reused
    uint64_t next_event_id = 1;
    bool needs_snapshot = false;
    std::vector<KvEvent> buffered;  // while needs_snapshot
    KvLoad load;
    uint64_t load_epoch = 0;        // bumped by each load report
    int64_t predicted_prefill = 0;
    int64_t predicted_decode = 0;
  };
  struct RoutedRequest {
    int slot = 0;
    uint64_t generation = 0;
    uint64_t load_epoch = 0;
    int prefill_blocks = 0;
    int decode_blocks = 0;
    bool prefill_done = false;
  };

  Worker* Find(std::string_view worker_id);
  void ApplyLocked(int slot, std::span<const KvEvent> events, ApplyEventsResult* result);
  void ApplyOne(int slot, const KvEvent& event);
  // Index into choice_ of the chosen worker. ChooseLeastCost: kv mode at temperature 0, from
  // overlap_ and the load terms; Choose: the other modes and temperatures (costs_ filled first).
  int ChooseLeastCost(int num_blocks, bool tiered);
  // tier_blocks_ / tier_credit_ of the live workers for this prompt (after overlap_); true when
  // some worker has tier hits.
  bool TierHits(std::span<const uint64_t> block_hashes);
  KvIndex& IndexOf(KvTier tier);
  int Choose();
  void Forget(const RoutedRequest& r, bool decode_too);
  void SyncLoad(int slot);  // slot_prefill_ / slot_decode_ from workers_[slot]

  const KvRouterConfig config_;
  mutable std::mutex mu_;
  KvIndex index_;
  KvIndex host_index_, disk_index_;  // the blocks of the workers' host and disk tiers
  std::vector<Worker> workers_;  // by slot
  std::unordered_map<std::string, int, StringHash, std::equal_to<>> slot_of_;
  std::vector<int> live_;        // slots of live workers, sorted by worker id
  std::vector<int> choice_;      // those of them that are routable (Route's candidates), sorted
  std::vector<int> free_slots_;
  std::unordered_map<std::string, RoutedRequest, StringHash, std::equal_to<>> routed_;
  uint64_t round_robin_next_ = 0;
  std::mt19937_64 rng_;
  // Scratch of one decision, sized with the workers (no allocation per decision).
  mutable std::vector<int> overlap_;     // by slot
  std::vector<int> tier_blocks_;         // by slot
  std::vector<double> tier_credit_;      // by slot
  // The load terms of each worker, by slot, kept next to each other for the cost loop (a Worker
  // is several cache lines): its predicted prefill blocks, and its decode blocks (the last
  // reported active blocks + those predicted since). SyncLoad after every change of either.
  std::vector<int> slot_prefill_, slot_decode_;
  std::vector<double> costs_;            // by position in choice_
};

}  // namespace tandem::router
