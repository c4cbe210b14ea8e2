// What one worker of a role can do on its device and model, measured (`tandem profile`, issue 27),
// as the SLA planner reads it: the shape of Dynamo's planner profiles (prefill TTFT and throughput
// against prompt length; decode ITL and throughput against the number of running requests and
// their context).
//
// JSON:
//   {"model": "...", "device": "...",
//    "prefill": [{"prompt_tokens": 512, "ttft_ms": 40.1}, ...],          one request alone
//    "decode":  [{"context": 1024, "batch": 8, "itl_ms": 6.2}, ...]}      steady decode steps
// Prefill points need distinct prompt lengths; decode points form a grid or scattered points (the
// lookup interpolates in batch within the nearest profiled context at or above the asked one).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::planner {

struct PrefillPoint {
  int prompt_tokens = 0;
  double ttft_ms = 0;  // one prompt alone on an idle worker
};

struct DecodePoint {
  int context = 0;  // tokens per running request
  int batch = 0;    // running requests
  double itl_ms = 0;
};

struct Profile {
  std::string model, device;
  std::vector<PrefillPoint> prefill;  // sorted by prompt_tokens
  std::vector<DecodePoint> decode;    // sorted by (context, batch)

  // One prompt's prefill time (ms), linear between profiled lengths, extrapolated by the nearest
  // segment's slope beyond them (at least the shortest point's time). 0 without prefill points.
  double PrefillMs(double prompt_tokens) const;
  // The inter-token latency (ms) of `batch` running requests of `context` tokens: among the
  // profiled contexts, the smallest at or above `context` (else the largest), linear in batch.
  double ItlMs(double context, double batch) const;
  // The largest batch whose ItlMs(context, batch) is at most itl_ms (0 when even one request is
  // slower; the largest profiled batch of that context when all are faster).
  double MaxBatch(double context, double itl_ms) const;
};

// InvalidArgument naming what is wrong (missing arrays, non-positive values, duplicate lengths).
Result<Profile> ProfileFromJson(const nlohmann::json& j);
nlohmann::json ToJson(const Profile& p);

}  // namespace tandem::planner
