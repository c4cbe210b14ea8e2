#include "router/kv_router.h"

#include <algorithm>
#include <type_traits>
#include <cmath>

#include "engine/block_hash.h"

namespace tandem::router {

const char* RouterModeName(RouterMode mode) {
  switch (mode) {
    case RouterMode::kKv: return "kv";
    case RouterMode::kRoundRobin: return "round-robin";
    case RouterMode::kRandom: return "random";
  }
  return "unknown";
}

Result<RouterMode> ParseRouterMode(std::string_view name) {
  if (name == "kv") return RouterMode::kKv;
  if (name == "round-robin") return RouterMode::kRoundRobin;
  if (name == "random") return RouterMode::kRandom;
  return Err(StatusCode::kInvalidArgument,
             "unknown router mode '{}' (expected kv, round-robin or random)", name);
}

Result<std::unique_ptr<KvRouter>> KvRouter::Create(const KvRouterConfig& config) {
  if (!(config.overlap_weight >= 0.0) || !std::isfinite(config.overlap_weight)) {
    return Err(StatusCode::kInvalidArgument, "overlap_weight must be >= 0 but is {}",
               config.overlap_weight);
  }
  if (!(config.temperature >= 0.0) || !std::isfinite(config.temperature)) {
    return Err(StatusCode::kInvalidArgument, "router temperature must be >= 0 but is {}",
               config.temperature);
  }
  if (config.block_size < 1) {
    return Err(StatusCode::kInvalidArgument, "block_size must be >= 1 but is {}", config.block_size);
  }
  for (const auto& [name, w] : {std::pair<const char*, double>{"host", config.host_hit_weight},
                                {"disk", config.disk_hit_weight}}) {
    if (!(w >= 0.0 && w <= 1.0)) {
      return Err(StatusCode::kInvalidArgument, "the {} hit weight must be in [0, 1] but is {}", name, w);
    }
  }
  return std::make_unique<KvRouter>(config);
}

KvRouter::KvRouter(const KvRouterConfig& config)
    : config_(config),
      index_(std::clamp(config.expected_workers, 1, KvIndex::kMaxWorkers), config.expected_blocks),
      host_index_(std::clamp(config.expected_workers, 1, KvIndex::kMaxWorkers), 1 << 10),
      disk_index_(std::clamp(config.expected_workers, 1, KvIndex::kMaxWorkers), 1 << 10),
      rng_(config.seed != 0 ? config.seed : std::random_device{}()) {}

KvRouter::Worker* KvRouter::Find(std::string_view worker_id) {
  auto it = slot_of_.find(worker_id);
  return it == slot_of_.end() ? nullptr : &workers_[it->second];
}

Status KvRouter::AddWorker(std::string_view worker_id) {
  if (worker_id.empty()) return Status(StatusCode::kInvalidArgument, "empty worker id");
  std::lock_guard<std::mutex> lock(mu_);
  if (slot_of_.count(worker_id)) {
    return Err(StatusCode::kFailedPrecondition, "worker '{}' is already known", worker_id);
  }
  int slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    if (static_cast<int>(workers_.size()) >= KvIndex::kMaxWorkers) {
      return Err(StatusCode::kResourceExhausted, "a router holds at most {} workers",
                 KvIndex::kMaxWorkers);
    }
    slot = static_cast<int>(workers_.size());
    workers_.emplace_back();
    index_.ReserveWorkers(static_cast<int>(workers_.size()));
    host_index_.ReserveWorkers(static_cast<int>(workers_.size()));
    disk_index_.ReserveWorkers(static_cast<int>(workers_.size()));
    overlap_.resize(workers_.size());
    tier_blocks_.resize(workers_.size());
    tier_credit_.resize(workers_.size());
    slot_prefill_.resize(workers_.size());
    slot_decode_.resize(workers_.size());
  }
  Worker& w = workers_[slot];
  const uint64_t generation = w.generation + 1;
  w = Worker{};
  w.id = std::string(worker_id);
  w.live = true;
  w.generation = generation;
  slot_of_.emplace(w.id, slot);
  SyncLoad(slot);
  auto by_id = [&](int a, int b) { return workers_[a].id < workers_[b].id; };
  live_.insert(std::lower_bound(live_.begin(), live_.end(), slot, by_id), slot);
  choice_.insert(std::lower_bound(choice_.begin(), choice_.end(), slot, by_id), slot);
  costs_.resize(live_.size());
  return Status::Ok();
}

void KvRouter::RemoveWorker(std::string_view worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slot_of_.find(worker_id);
  if (it == slot_of_.end()) return;
  const int slot = it->second;
  slot_of_.erase(it);
  index_.RemoveWorker(slot);
  host_index_.RemoveWorker(slot);
  disk_index_.RemoveWorker(slot);
  live_.erase(std::find(live_.begin(), live_.end(), slot));
  if (auto c = std::find(choice_.begin(), choice_.end(), slot); c != choice_.end()) choice_.erase(c);
  Worker& w = workers_[slot];
  const uint64_t generation = w.generation + 1;  // its routed requests no longer count
  w = Worker{};
  w.generation = generation;
  SyncLoad(slot);
  free_slots_.push_back(slot);
}

bool KvRouter::HasWorker(std::string_view worker_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slot_of_.count(worker_id) > 0;
}

Status KvRouter::SetRoutable(std::string_view worker_id, bool routable) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slot_of_.find(worker_id);
  if (it == slot_of_.end()) return Err(StatusCode::kNotFound, "unknown worker '{}'", worker_id);
  const int slot = it->second;
  Worker& w = workers_[slot];
  if (w.routable == routable) return Status::Ok();
  w.routable = routable;
  auto by_id = [&](int a, int b) { return workers_[a].id < workers_[b].id; };
  auto pos = std::lower_bound(choice_.begin(), choice_.end(), slot, by_id);
  if (routable) {
    choice_.insert(pos, slot);
  } else {
    choice_.erase(pos);  // it is there: routable until now
  }
  return Status::Ok();
}

int KvRouter::num_workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(live_.size());
}

size_t KvRouter::num_indexed_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.num_blocks();
}

// ---- events ----

KvIndex& KvRouter::IndexOf(KvTier tier) {
  return tier == KvTier::kHost ? host_index_ : tier == KvTier::kDisk ? disk_index_ : index_;
}

void KvRouter::ApplyOne(int slot, const KvEvent& event) {
  if (const auto* s = std::get_if<KvStoredEvent>(&event.data)) {
    KvIndex& index = IndexOf(s->tier);
    for (uint64_t h : s->block_hashes) index.Store(slot, h);
  } else if (const auto* r = std::get_if<KvRemovedEvent>(&event.data)) {
    KvIndex& index = IndexOf(r->tier);
    for (uint64_t h : r->block_hashes) index.Remove(slot, h);
  } else {  // cleared{}: the worker's KV pool (its tiers keep their blocks)
    index_.RemoveWorker(slot);
  }
}

void KvRouter::ApplyLocked(int slot, std::span<const KvEvent> events, ApplyEventsResult* result) {
  Worker& w = workers_[slot];
  for (const KvEvent& e : events) {
    if (!w.needs_snapshot && e.event_id < w.next_event_id) {
      ++result->num_stale;
      continue;
    }
    if (!w.needs_snapshot && e.event_id > w.next_event_id) w.needs_snapshot = true;  // a gap
    if (w.needs_snapshot) {
      // Kept for the replay after the snapshot; past the bound the newest are dropped, which the
      // replay then sees as another gap.
      if (w.buffered.size() < config_.max_buffered_events) {
        w.buffered.push_back(e);
        ++result->num_buffered;
      }
      continue;
    }
    ApplyOne(slot, e);
    ++w.next_event_id;
    ++result->num_applied;
  }
  result->needs_snapshot = w.needs_snapshot;
}

Result<ApplyEventsResult> KvRouter::ApplyEvents(std::string_view worker_id,
                                                std::span<const KvEvent> events) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slot_of_.find(worker_id);
  if (it == slot_of_.end()) return Err(StatusCode::kNotFound, "unknown worker '{}'", worker_id);
  ApplyEventsResult result;
  ApplyLocked(it->second, events, &result);
  return result;
}

Result<ApplyEventsResult> KvRouter::ApplySnapshot(std::string_view worker_id,
                                                  const KvCacheSnapshot& snapshot) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slot_of_.find(worker_id);
  if (it == slot_of_.end()) return Err(StatusCode::kNotFound, "unknown worker '{}'", worker_id);
  const int slot = it->second;
  Worker& w = workers_[slot];
  ApplyEventsResult result;
  if (!w.needs_snapshot && snapshot.last_event_id + 1 < w.next_event_id) {
    // E.g. a joining worker's snapshot, taken before its first request and applied after that
    // request's events: the blocks here are exact and newer.
    result.stale_snapshot = true;
    return result;
  }
  index_.RemoveWorker(slot);
  host_index_.RemoveWorker(slot);
  disk_index_.RemoveWorker(slot);
  for (const KvCachedBlock& b : snapshot.blocks) IndexOf(b.tier).Store(slot, b.block_hash);
  w.next_event_id = snapshot.last_event_id + 1;
  w.needs_snapshot = false;
  w.load = snapshot.load;
  ++w.load_epoch;
  w.predicted_decode = 0;
  SyncLoad(slot);
  std::vector<KvEvent> buffered;
  buffered.swap(w.buffered);
  std::stable_sort(buffered.begin(), buffered.end(),
                   [](const KvEvent& a, const KvEvent& b) { return a.event_id < b.event_id; });
  ApplyLocked(slot, buffered, &result);
  return result;
}

Status KvRouter::UpdateLoad(std::string_view worker_id, const KvLoad& load) {
  std::lock_guard<std::mutex> lock(mu_);
  Worker* w = Find(worker_id);
  if (!w) return Err(StatusCode::kNotFound, "unknown worker '{}'", worker_id);
  w->load = load;
  ++w->load_epoch;
  w->predicted_decode = 0;
  SyncLoad(static_cast<int>(w - workers_.data()));
  return Status::Ok();
}

// ---- decisions ----

int KvRouter::Choose() {
  const int n = static_cast<int>(choice_.size());
  switch (config_.mode) {
    case RouterMode::kRoundRobin:
      return static_cast<int>(round_robin_next_++ % static_cast<uint64_t>(n));
    case RouterMode::kRandom:
      return std::uniform_int_distribution<int>(0, n - 1)(rng_);
    case RouterMode::kKv:
      break;
  }
  const auto [lo, hi] = std::minmax_element(costs_.begin(), costs_.begin() + n);
  const double c_min = *lo, c_max = *hi;
  if (c_max == c_min) return std::uniform_int_distribution<int>(0, n - 1)(rng_);
  const double scale = (c_max - c_min) * config_.temperature;
  double total = 0.0;
  for (int i = 0; i < n; ++i) {
    costs_[i] = std::exp(-(costs_[i] - c_min) / scale);  // costs_ now holds the weights
    total += costs_[i];
  }
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (int i = 0; i < n; ++i) {
    r -= costs_[i];
    if (r < 0.0) return i;
  }
  return n - 1;
}

namespace {

// The least (cost, decode) of n workers and how many tie on both, costs as `Cost` (double, or
// int64 where that is exact: the same order). cost_of(i, &decode) gives worker i's.
template <typename Cost, typename CostOf>
int LeastCost(int n, const CostOf& cost_of, Cost* best_cost, int* best_decode, int* num_ties) {
  *best_cost = cost_of(0, best_decode);
  int best = 0, ties = 1;
  for (int i = 1; i < n; ++i) {
    int decode;
    const Cost cost = cost_of(i, &decode);
    if (cost < *best_cost || (cost == *best_cost && decode < *best_decode)) {
      *best_cost = cost;
      *best_decode = decode;
      best = i;
      ties = 1;
    } else if (cost == *best_cost && decode == *best_decode) {
      ++ties;
    }
  }
  *num_ties = ties;
  return best;
}

}  // namespace

bool KvRouter::TierHits(std::span<const uint64_t> block_hashes) {
  const int n = static_cast<int>(block_hashes.size());
  bool any = false;
  for (int slot : live_) {
    int pos = overlap_[slot], host = 0, disk = 0;
    if (host_index_.num_blocks(slot) > 0) {
      while (pos < n && host_index_.Contains(slot, block_hashes[pos])) ++pos, ++host;
    }
    if (disk_index_.num_blocks(slot) > 0) {
      while (pos < n && disk_index_.Contains(slot, block_hashes[pos])) ++pos, ++disk;
    }
    tier_blocks_[slot] = host + disk;
    tier_credit_[slot] = config_.host_hit_weight * host + config_.disk_hit_weight * disk;
    any = any || host + disk > 0;
  }
  return any;
}

int KvRouter::ChooseLeastCost(int num_blocks, bool tiered) {
  // One pass computing each cost and keeping the least (cost, decode blocks) and how many tie on
  // both; among the k tied workers the j-th (in choice_ order) for one uniform j in [0, k): one
  // random draw per decision, not one per tie.
  const int n = static_cast<int>(choice_.size());
  const double overlap_weight = config_.overlap_weight;
  const int* const live = choice_.data();
  const int* const overlap = overlap_.data();
  const int* const slot_prefill = slot_prefill_.data();
  const int* const slot_decode = slot_decode_.data();
  const double* const credit = tiered ? tier_credit_.data() : nullptr;
  // The decision with costs in the weight's type (double with tier hits).
  auto decide = [&](auto weight) {
    auto cost_of = [&](int i, int* decode) {
      const int s = live[i];
      *decode = slot_decode[s];
      if constexpr (std::is_floating_point_v<decltype(weight)>) {
        const double c = credit != nullptr ? credit[s] : 0.0;
        return weight * (num_blocks - overlap[s] - c + slot_prefill[s]) + *decode;
      } else {
        return weight * (num_blocks - overlap[s] + slot_prefill[s]) + *decode;
      }
    };
    decltype(cost_of(0, nullptr)) best_cost;
    int best_decode, num_ties;
    const int best = LeastCost(n, cost_of, &best_cost, &best_decode, &num_ties);
    if (num_ties == 1) return best;
    int j = std::uniform_int_distribution<int>(0, num_ties - 1)(rng_);
    for (int i = best;; ++i) {  // best is the first of the tied workers
      int decode;
      if (cost_of(i, &decode) == best_cost && decode == best_decode && j-- == 0) return i;
    }
  };
  if (!tiered && overlap_weight >= 0.0 && overlap_weight <= 1 << 20 &&
      overlap_weight == std::floor(overlap_weight)) {
    // An integral weight (the default 1): w * prefill + decode of 32-bit ints is below 2^53, so
    // the double cost (Choose's) is exact and int64 arithmetic orders the workers the same.
    return decide(static_cast<int64_t>(overlap_weight));
  }
  return decide(overlap_weight);
}

Status KvRouter::Route(std::span<const uint64_t> block_hashes, RoutingDecision* decision,
                       std::string_view request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (choice_.empty()) {
    return Status(StatusCode::kFailedPrecondition,
                  live_.empty() ? "no worker available" : "no routable worker");
  }
  if (!request_id.empty() && routed_.count(request_id)) {
    return Err(StatusCode::kInvalidArgument, "request '{}' is already routed", request_id);
  }
  const int num_blocks = static_cast<int>(block_hashes.size());
  index_.FindMatches(block_hashes, overlap_);
  const bool tiered = (host_index_.num_blocks() > 0 || disk_index_.num_blocks() > 0) && TierHits(block_hashes);
  if (!tiered) {
    for (int slot : live_) tier_blocks_[slot] = 0, tier_credit_[slot] = 0.0;
  }
  int pick;
  if (config_.mode == RouterMode::kKv && config_.temperature <= 0.0) {
    pick = ChooseLeastCost(num_blocks, tiered);
  } else {
    const int n = static_cast<int>(choice_.size());
    const double overlap_weight = config_.overlap_weight;
    for (int i = 0; i < n; ++i) {
      const int s = choice_[i];
      costs_[i] = overlap_weight * (num_blocks - overlap_[s] - tier_credit_[s] + slot_prefill_[s]) +
                  slot_decode_[s];
    }
    pick = Choose();  // may overwrite costs_ with sampling weights
  }
  const int slot = choice_[pick];
  Worker& w = workers_[slot];
  decision->worker_id.assign(w.id);
  decision->num_prompt_blocks = num_blocks;
  decision->overlap_blocks = overlap_[slot];
  decision->prefill_blocks = num_blocks - overlap_[slot] + slot_prefill_[slot];
  decision->decode_blocks = slot_decode_[slot];
  decision->tier_blocks = tier_blocks_[slot];
  decision->tier_credit = tier_credit_[slot];
  decision->cost = config_.overlap_weight * (decision->prefill_blocks - decision->tier_credit) +
                   decision->decode_blocks;
  if (!request_id.empty()) {
    RoutedRequest r;
    r.slot = slot;
    r.generation = w.generation;
    r.load_epoch = w.load_epoch;
    r.prefill_blocks = num_blocks - overlap_[slot] - tier_blocks_[slot];  // tier hits are copied
    r.decode_blocks = num_blocks;
    w.predicted_prefill += r.prefill_blocks;
    w.predicted_decode += r.decode_blocks;
    SyncLoad(slot);
    routed_.emplace(std::string(request_id), r);
  }
  return Status::Ok();
}

Result<RoutingDecision> KvRouter::Route(std::span<const uint64_t> block_hashes,
                                        std::string_view request_id) {
  RoutingDecision decision;
  TANDEM_RETURN_IF_ERROR(Route(block_hashes, &decision, request_id));
  return decision;
}

Result<RoutingDecision> KvRouter::RouteTokens(std::span<const int32_t> token_ids,
                                              std::string_view request_id) {
  const std::vector<uint64_t> hashes = ComputeBlockHashes(token_ids, config_.block_size);
  return Route(hashes, request_id);
}

void KvRouter::Forget(const RoutedRequest& r, bool decode_too) {
  Worker& w = workers_[r.slot];
  if (w.generation != r.generation) return;  // the worker left meanwhile
  if (!r.prefill_done) w.predicted_prefill -= r.prefill_blocks;
  if (decode_too && r.load_epoch == w.load_epoch) w.predicted_decode -= r.decode_blocks;
  SyncLoad(r.slot);
}

void KvRouter::SyncLoad(int slot) {
  const Worker& w = workers_[slot];
  slot_prefill_[slot] = static_cast<int>(w.predicted_prefill);
  slot_decode_[slot] = w.load.num_active_blocks + static_cast<int>(w.predicted_decode);
}

void KvRouter::MarkPrefillDone(std::string_view request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = routed_.find(request_id);
  if (it == routed_.end() || it->second.prefill_done) return;
  Forget(it->second, /*decode_too=*/false);
  it->second.prefill_done = true;
}

void KvRouter::Free(std::string_view request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = routed_.find(request_id);
  if (it == routed_.end()) return;
  Forget(it->second, /*decode_too=*/true);
  routed_.erase(it);
}

// ---- inspection ----

std::vector<std::pair<std::string, int>> KvRouter::Overlaps(
    std::span<const uint64_t> block_hashes) const {
  std::lock_guard<std::mutex> lock(mu_);
  index_.FindMatches(block_hashes, overlap_);
  std::vector<std::pair<std::string, int>> out;
  for (int slot : live_) out.emplace_back(workers_[slot].id, overlap_[slot]);
  return out;
}

std::vector<RouterWorkerState> KvRouter::Workers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RouterWorkerState> out;
  for (int slot : live_) {
    const Worker& w = workers_[slot];
    RouterWorkerState s;
    s.worker_id = w.id;
    s.num_cached_blocks = index_.num_blocks(slot);
    s.load = w.load;
    s.predicted_prefill_blocks = w.predicted_prefill;
    s.predicted_decode_blocks = w.predicted_decode;
    s.next_event_id = w.next_event_id;
    s.needs_snapshot = w.needs_snapshot;
    s.routable = w.routable;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tandem::router
