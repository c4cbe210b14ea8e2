#include "engine/kv_events.h"

#include <utility>

namespace tandem {

const char* KvTierName(KvTier tier) {
  switch (tier) {
    case KvTier::kHost: return "host";
    case KvTier::kDisk: return "disk";
    default: return "device";
  }
}

void KvEventRecorder::Stored(uint64_t parent_hash, uint64_t block_hash, KvTier tier) {
  if (!pending_.empty()) {
    if (auto* s = std::get_if<KvStoredEvent>(&pending_.back().data);
        s && s->tier == tier && !s->block_hashes.empty() && s->block_hashes.back() == parent_hash) {
      s->block_hashes.push_back(block_hash);
      return;
    }
  }
  pending_.push_back(KvEvent{0, KvStoredEvent{parent_hash, {block_hash}, tier}});
}

void KvEventRecorder::Removed(uint64_t block_hash, KvTier tier) {
  if (!pending_.empty()) {
    if (auto* r = std::get_if<KvRemovedEvent>(&pending_.back().data); r && r->tier == tier) {
      r->block_hashes.push_back(block_hash);
      return;
    }
  }
  pending_.push_back(KvEvent{0, KvRemovedEvent{{block_hash}, tier}});
}

void KvEventRecorder::Cleared() {
  pending_.clear();
  pending_.push_back(KvEvent{0, KvClearedEvent{}});
}

std::vector<KvEvent> KvEventRecorder::Take() {
  std::vector<KvEvent> out;
  out.swap(pending_);
  for (KvEvent& e : out) e.event_id = next_event_id_++;
  return out;
}

void KvEventQueue::OnStep(KvEventBatch batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    load_ = batch.load;
    has_load_ = true;
    if (events_.size() + batch.events.size() > max_events_) {
      dropped_ += batch.events.size();
      total_dropped_ += batch.events.size();
    } else {
      for (KvEvent& e : batch.events) events_.push_back(std::move(e));
    }
  }
  cv_.notify_one();
}

KvEventQueue::Drained KvEventQueue::Drain(std::chrono::milliseconds timeout) {
  Drained out;
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout.count() > 0) {
    cv_.wait_for(lock, timeout, [&] { return !events_.empty() || has_load_ || dropped_ > 0; });
  }
  out.events.assign(std::make_move_iterator(events_.begin()),
                    std::make_move_iterator(events_.end()));
  events_.clear();
  out.load = load_;
  out.has_load = has_load_;
  has_load_ = false;
  out.num_dropped_events = dropped_;
  dropped_ = 0;
  return out;
}

uint64_t KvEventQueue::total_dropped_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_dropped_;
}

// ---- JSON ----

namespace {

Result<std::vector<uint64_t>> HashesFromJson(const nlohmann::json& j, const char* what) {
  if (!j.is_array()) return Err(StatusCode::kInvalidArgument, "{}: block_hashes is not an array", what);
  std::vector<uint64_t> out;
  out.reserve(j.size());
  for (const auto& h : j) {
    if (!h.is_number_unsigned()) {
      return Err(StatusCode::kInvalidArgument, "{}: a block hash is not an unsigned integer", what);
    }
    out.push_back(h.get<uint64_t>());
  }
  return out;
}

// An event's "tier" (absent: the device pool).
Result<KvTier> TierFromJson(const nlohmann::json& event, const char* what) {
  auto it = event.find("tier");
  if (it == event.end()) return KvTier::kDevice;
  if (it->is_string()) {
    const std::string& t = it->get_ref<const std::string&>();
    if (t == "device") return KvTier::kDevice;
    if (t == "host") return KvTier::kHost;
    if (t == "disk") return KvTier::kDisk;
  }
  return Err(StatusCode::kInvalidArgument, "{}: tier is not \"device\", \"host\" or \"disk\"", what);
}

Result<int> IntField(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) {
    return Err(StatusCode::kInvalidArgument, "KV load: '{}' is missing or not an integer", name);
  }
  return it->get<int>();
}

}  // namespace

nlohmann::json ToJson(const KvEvent& event) {
  nlohmann::json data;
  if (const auto* s = std::get_if<KvStoredEvent>(&event.data)) {
    data["stored"] = {{"parent_hash", s->parent_hash}, {"block_hashes", s->block_hashes}};
    if (s->tier != KvTier::kDevice) data["stored"]["tier"] = KvTierName(s->tier);
  } else if (const auto* r = std::get_if<KvRemovedEvent>(&event.data)) {
    data["removed"] = {{"block_hashes", r->block_hashes}};
    if (r->tier != KvTier::kDevice) data["removed"]["tier"] = KvTierName(r->tier);
  } else {
    data["cleared"] = nlohmann::json::object();
  }
  return {{"event_id", event.event_id}, {"data", std::move(data)}};
}

Result<KvEvent> KvEventFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("event_id") || !j["event_id"].is_number_unsigned() ||
      !j.contains("data") || !j["data"].is_object() || j["data"].size() != 1) {
    return Status(StatusCode::kInvalidArgument,
                  "a KV event needs an unsigned 'event_id' and a 'data' object with one kind");
  }
  KvEvent e;
  e.event_id = j["event_id"].get<uint64_t>();
  const nlohmann::json& data = j["data"];
  if (auto it = data.find("stored"); it != data.end()) {
    if (!it->is_object()) return Status(StatusCode::kInvalidArgument, "stored: not an object");
    KvStoredEvent s;
    auto parent = it->find("parent_hash");
    if (parent == it->end() || !parent->is_number_unsigned()) {
      return Status(StatusCode::kInvalidArgument, "stored: parent_hash is not an unsigned integer");
    }
    s.parent_hash = parent->get<uint64_t>();
    TANDEM_ASSIGN_OR_RETURN(s.block_hashes, HashesFromJson(it->value("block_hashes", nlohmann::json()), "stored"));
    TANDEM_ASSIGN_OR_RETURN(s.tier, TierFromJson(*it, "stored"));
    e.data = std::move(s);
  } else if (auto it = data.find("removed"); it != data.end()) {
    // value() throws on a non-object: a worker's bad payload must not end the router's process.
    if (!it->is_object()) return Status(StatusCode::kInvalidArgument, "removed: not an object");
    KvRemovedEvent r;
    TANDEM_ASSIGN_OR_RETURN(r.block_hashes, HashesFromJson(it->value("block_hashes", nlohmann::json()), "removed"));
    TANDEM_ASSIGN_OR_RETURN(r.tier, TierFromJson(*it, "removed"));
    e.data = std::move(r);
  } else if (data.contains("cleared")) {
    e.data = KvClearedEvent{};
  } else {
    return Err(StatusCode::kInvalidArgument, "unknown KV event kind '{}'", data.begin().key());
  }
  return e;
}

nlohmann::json ToJson(const KvLoad& load) {
  return {{"num_active_blocks", load.num_active_blocks},
          {"num_total_blocks", load.num_total_blocks},
          {"num_waiting", load.num_waiting},
          {"num_running", load.num_running}};
}

Result<KvLoad> KvLoadFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Status(StatusCode::kInvalidArgument, "KV load is not an object");
  KvLoad load;
  TANDEM_ASSIGN_OR_RETURN(load.num_active_blocks, IntField(j, "num_active_blocks"));
  TANDEM_ASSIGN_OR_RETURN(load.num_total_blocks, IntField(j, "num_total_blocks"));
  TANDEM_ASSIGN_OR_RETURN(load.num_waiting, IntField(j, "num_waiting"));
  TANDEM_ASSIGN_OR_RETURN(load.num_running, IntField(j, "num_running"));
  return load;
}

nlohmann::json ToJson(const KvCacheSnapshot& snapshot) {
  nlohmann::json blocks = nlohmann::json::array();
  // [block_hash, parent_hash], a tier's block [block_hash, parent_hash, tier (1 host, 2 disk)].
  for (const KvCachedBlock& b : snapshot.blocks) {
    if (b.tier == KvTier::kDevice) blocks.push_back({b.block_hash, b.parent_hash});
    else blocks.push_back({b.block_hash, b.parent_hash, static_cast<uint64_t>(b.tier)});
  }
  return {{"last_event_id", snapshot.last_event_id},
          {"blocks", std::move(blocks)},
          {"load", ToJson(snapshot.load)}};
}

Result<KvCacheSnapshot> KvCacheSnapshotFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("last_event_id") || !j["last_event_id"].is_number_unsigned() ||
      !j.contains("blocks") || !j["blocks"].is_array() || !j.contains("load")) {
    return Status(StatusCode::kInvalidArgument,
                  "a KV cache snapshot needs 'last_event_id', 'blocks' and 'load'");
  }
  KvCacheSnapshot s;
  s.last_event_id = j["last_event_id"].get<uint64_t>();
  for (const auto& b : j["blocks"]) {
    if (!b.is_array() || (b.size() != 2 && b.size() != 3) || !b[0].is_number_unsigned() ||
        !b[1].is_number_unsigned() ||
        (b.size() == 3 && (!b[2].is_number_unsigned() || b[2].get<uint64_t>() >= kNumKvTiers))) {
      return Status(StatusCode::kInvalidArgument,
                    "a snapshot block is not [block_hash, parent_hash] or [block_hash, parent_hash, "
                    "tier] (unsigned integers, tier 0-2)");
    }
    s.blocks.push_back({b[0].get<uint64_t>(), b[1].get<uint64_t>(),
                        b.size() == 3 ? static_cast<KvTier>(b[2].get<uint64_t>()) : KvTier::kDevice});
  }
  TANDEM_ASSIGN_OR_RETURN(s.load, KvLoadFromJson(j["load"]));
  return s;
}

}  // namespace tandem
