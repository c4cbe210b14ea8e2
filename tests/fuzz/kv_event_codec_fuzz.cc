// The KV event codec (events/kv_event_codec.h): the payloads a router takes from any worker on the
// event plane. Decode as a batch and as a snapshot; what decodes must encode and decode back to
// the same value (the router and a worker agree on what was said).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "events/kv_event_codec.h"

using namespace tandem;
using namespace tandem::runtime;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "kv_event_codec_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view payload(reinterpret_cast<const char*>(data), size);
  if (auto batch = DecodeKvEventBatch(payload); batch.ok()) {
    auto again = DecodeKvEventBatch(EncodeKvEventBatch(*batch));
    Check(again.ok(), "an encoded batch does not decode");
    Check(again->events == batch->events && again->load == batch->load, "a batch changed in a round trip");
  } else {
    Check(batch.status().code() == StatusCode::kDataLoss, "a bad batch that is not DataLoss");
  }
  if (auto snapshot = DecodeKvCacheSnapshot(payload); snapshot.ok()) {
    auto again = DecodeKvCacheSnapshot(EncodeKvCacheSnapshot(*snapshot));
    Check(again.ok(), "an encoded snapshot does not decode");
    Check(again->last_event_id == snapshot->last_event_id && again->blocks == snapshot->blocks &&
              again->load == snapshot->load,
          "a snapshot changed in a round trip");
  } else {
    Check(snapshot.status().code() == StatusCode::kDataLoss, "a bad snapshot that is not DataLoss");
  }
  return 0;
}
