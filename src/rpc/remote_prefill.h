// The remote prefill contract between a decode worker and a prefill worker (DESIGN.md section 1),
// in C++ terms; tandem.proto's Worker.RemotePrefill carries it over gRPC (proto_convert.h).
//
//   decode:  reserves blocks for the whole prompt (Engine RemotePrefillTask), sends the request
//            with its transfer agent's metadata and KV layout;
//   prefill: computes the prompt (its own prefix cache first), WRITES blocks
//            [num_cached_tokens / block_size, ceil(len / block_size)) of the decode worker's block
//            table through the transfer agent, answers with the first sampled token once the
//            data landed.
// Write window: every write into the decode worker starts and ends within `write_window` of the
// prefill worker receiving the request; after that, or after the handler answered (with any
// status), nothing more is written for this request. The decode worker's deadline for the call is
// longer than the window, so when the call has ended its blocks are safe to reuse or recompute.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "engine/sampling_params.h"

namespace tandem::runtime {

// The notification the prefill worker's last write for a request carries. It reaches the decode
// worker's agent after every byte of the request's KV landed (that write is posted after all the
// others ended, and a transfer agent delivers a notification after its data), typically before
// the call's answer (one gRPC leg less), but possibly after it. Format:
// "kv-ready <first token id> <call id> <request id>" (decimal numbers; the request id last, as is)
// when the first token can travel in it, i.e. no logprobs were asked for; else the request id
// alone. A decode worker may take the first form as the answer of the call with that call id
// (RemotePrefillRequest::call_id) and start decoding at once (DecodeDisagg does); the answer
// still follows.
std::string KvReadyNotification(const std::string& request_id, uint64_t call_id, int32_t first_token);
struct KvReady {
  std::string request_id;
  uint64_t call_id = 0;
  int32_t first_token = -1;
};
// nullopt for anything but the first form (the bare request id included).
std::optional<KvReady> ParseKvReadyNotification(std::string_view message);

// Where the decode worker wants the KV: its agent and its KV pool layout.
struct KVTarget {
  std::string agent_name;
  std::string agent_metadata;         // transfer::Agent::ExportMetadata() bytes
  std::vector<uint64_t> layer_base;   // [num_layers] address of block 0 of each layer
  uint64_t block_bytes = 0;           // one block of one layer
  int block_size = 0;                 // tokens per block
  std::vector<int> block_ids;         // the block table over the whole prompt
  int num_cached_tokens = 0;          // leading tokens already there (a multiple of block_size)
  std::string kv_cache_dtype;         // ModelRunner::kv_cache_dtype() of the decode worker
};

struct RemotePrefillRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;              // the first token is sampled with these
  KVTarget target;
  std::chrono::milliseconds write_window{0};
  uint64_t call_id = 0;  // the decode worker's number for this call (0: none); see KvReadyNotification
};

struct RemotePrefillResult {
  int32_t first_token_id = -1;
  std::vector<TokenLogprob> logprobs;  // the first token's (empty unless params.logprobs >= 0)
  int num_prefill_cached_tokens = 0;   // prompt tokens the prefill worker's prefix cache had
  int num_blocks_written = 0;          // blocks of the table written (each one: all layers)
  uint64_t bytes_written = 0;
  double transfer_seconds = 0.0;       // post to completion of the write
};

using RemotePrefillDone = std::function<void(Result<RemotePrefillResult>)>;

// Served by a prefill worker (worker/prefill_handler.h); called by WorkerService.
class RemotePrefillHandler {
 public:
  virtual ~RemotePrefillHandler() = default;
  // Starts the prefill; `done` is called exactly once, from any thread. Errors: InvalidArgument
  // (geometry differs from this worker's KV pool, block table too short, bad prompt),
  // FailedPrecondition (the write window closed first; nothing written), Internal/others from the
  // engine or the transfer.
  virtual void Prefill(RemotePrefillRequest request, RemotePrefillDone done) = 0;
  // The caller went away (the call was cancelled, or Worker.CancelRemotePrefill named the
  // request): stop computing if still computing, or drop it if still queued. `done` still comes (with an error
  // or a result); writes already started end within the window.
  virtual void Cancel(const std::string& request_id) = 0;
};

}  // namespace tandem::runtime
