// EngineClient: what a frontend needs from the workers that generate tokens. Implemented by
// AsyncEngine (an Engine on its own thread, in this process) and later by remote worker clients
// (request plane). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "engine/sampling_params.h"

namespace tandem {

struct GenerateRequest {
  std::string request_id;               // unique while in flight
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  RequestOptions options{};             // disaggregation roles (engine.h); default: none
};

// Called for every output of a request, on a thread of the client's choosing (not the caller's):
// zero or more outputs with finished=false, then exactly one with finished=true (also after
// Cancel, with FinishReason::kAbort, and on errors, with kError and `error` set).
using OutputCallback = std::function<void(RequestOutput)>;

struct ServedModelInfo {
  std::string name;          // the model id served (e.g. "tiny-qwen3")
  int max_model_len = 0;     // context length in tokens
  int vocab_size = 0;
};

struct EngineClientStats {
  EngineStats engine;
  int num_pending = 0;  // submitted, not yet finished
};

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  // Queues a request. Errors returned here are synchronous and final (no callback follows):
  // ResourceExhausted when the waiting queue is full (HTTP 503), InvalidArgument for requests the
  // engine rejects up front (prompt longer than the context naming both lengths, bad token ids,
  // a prompt the whole KV pool cannot hold, naming both block counts).
  virtual Status Submit(GenerateRequest request, OutputCallback on_output) = 0;
  // Ends a request (e.g. the client disconnected) within one engine step; its KV blocks return
  // to the pool; its callback gets a final kAbort output. Unknown ids are ignored.
  virtual void Cancel(const std::string& request_id) = 0;
  virtual EngineClientStats Stats() const = 0;
  virtual ServedModelInfo model_info() const = 0;
};

}  // namespace tandem
