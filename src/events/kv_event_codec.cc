#include "events/kv_event_codec.h"

namespace tandem::runtime {
namespace {

Result<nlohmann::json> Parse(std::string_view payload, const char* what) {
  nlohmann::json j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Err(StatusCode::kDataLoss, "a KV {} payload is not a JSON object", what);
  }
  return j;
}

Status AsDataLoss(const Status& st, const char* what) {
  return Err(StatusCode::kDataLoss, "bad KV {} payload: {}", what, st.message());
}

}  // namespace

std::string EncodeKvEventBatch(const KvEventBatch& batch) {
  nlohmann::json events = nlohmann::json::array();
  for (const KvEvent& e : batch.events) events.push_back(ToJson(e));
  return nlohmann::json{{"events", std::move(events)}, {"load", ToJson(batch.load)}}.dump();
}

Result<KvEventBatch> DecodeKvEventBatch(std::string_view payload) {
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json j, Parse(payload, "event batch"));
  KvEventBatch batch;
  auto events = j.find("events");
  auto load = j.find("load");
  if (events == j.end() || !events->is_array() || load == j.end()) {
    return Status(StatusCode::kDataLoss, "a KV event batch needs 'events' (array) and 'load'");
  }
  for (const nlohmann::json& e : *events) {
    Result<KvEvent> event = KvEventFromJson(e);
    if (!event.ok()) return AsDataLoss(event.status(), "event batch");
    batch.events.push_back(std::move(*event));
  }
  Result<KvLoad> l = KvLoadFromJson(*load);
  if (!l.ok()) return AsDataLoss(l.status(), "event batch");
  batch.load = *l;
  return batch;
}

std::string EncodeKvCacheSnapshot(const KvCacheSnapshot& snapshot) {
  return ToJson(snapshot).dump();
}

Result<KvCacheSnapshot> DecodeKvCacheSnapshot(std::string_view payload) {
  TANDEM_ASSIGN_OR_RETURN(nlohmann::json j, Parse(payload, "snapshot"));
  Result<KvCacheSnapshot> snapshot = KvCacheSnapshotFromJson(j);
  if (!snapshot.ok()) return AsDataLoss(snapshot.status(), "snapshot");
  return snapshot;
}

}  // namespace tandem::runtime
