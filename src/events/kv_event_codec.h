// The payload of the KV events a worker publishes on KvEventsSubject(namespace) (event_plane.h),
// and of its Worker.Snapshot answer for that subject. JSON (kv_events.h field names):
//   batch     {"events":[<KvEvent>...],"load":<KvLoad>}   one plane event per batch; "events" may
//             be empty (a load report). Events are in event_id order.
//   snapshot  ToJson(KvCacheSnapshot): {"last_event_id":N,"blocks":[...],"load":{...}}
// Shared by the publisher (worker/kv_event_publisher.h) and the router side (router/kv_routing.h).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/kv_events.h"

namespace tandem::runtime {

std::string EncodeKvEventBatch(const KvEventBatch& batch);
// DataLoss for a payload that is not such a batch.
Result<KvEventBatch> DecodeKvEventBatch(std::string_view payload);
std::string EncodeKvCacheSnapshot(const KvCacheSnapshot& snapshot);
Result<KvCacheSnapshot> DecodeKvCacheSnapshot(std::string_view payload);

}  // namespace tandem::runtime
