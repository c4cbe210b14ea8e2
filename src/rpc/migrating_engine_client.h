// MigratingEngineClient: request migration (Dynamo's --migration-limit). An EngineClient decorator
// over another (the frontend's RemoteEngineClient): when the worker serving a request is lost
// mid-stream (a final kError output with RequestOutput::worker_lost), the request is sent again,
// to whichever worker the inner client picks, continuing from the tokens already streamed; at most
// `migration_limit` times per request. The caller sees one uninterrupted stream.
//
//   Submit   forwards to the inner client (same errors) under the caller's request id; a
//            migrated attempt k (1..limit) runs under the inner id "<id>#m<k>".
//   outputs  the inner attempts' outputs with the caller's request_id; num_prompt_tokens and
//            num_cached_tokens are the first attempt's, num_output_tokens counts every token
//            streamed so far (all attempts). Exactly one finished output, as the inner contract:
//            the last attempt's, or kError (the lost worker's message, plus why migration did not
//            happen when it was possible) when the limit is reached, no token budget is left, or
//            the resubmission is refused (e.g. no worker left: "no worker available ..."; with
//            RemoteEngineClientOptions::wait_for_worker, once that wait for a live worker ended).
//            Refusals of an engine, deadlines and aborts are never migrated.
//   Cancel   reaches whichever attempt is live; a request waiting for its resubmission finishes
//            with kAbort without one.
//   Stats / model_info  the inner client's.
//
// A migrated attempt is the original request with
//   prompt_token_ids = original prompt + every token streamed so far,
//   max_tokens       = original max_tokens - tokens streamed so far,
//   the other SamplingParams unchanged (stop strings, stop token ids, seed, logprobs, penalties).
// What is preserved: greedy requests continue exactly as an uninterrupted run would (up to the
// numerics of the new worker's batch); the token budget; stop conditions on tokens after the
// break. What is not: (1) a seeded sampled request restarts its generator from the seed at the
// break (reproducible for the same break point, but not the uninterrupted sequence); (2)
// frequency/presence penalties count only tokens after the break (the earlier ones are prompt now;
// repetition penalty, which sees prompt and output, is unchanged); (3) a stop string spanning the
// break is not matched, and text the lost attempt held back (an incomplete UTF-8 character or a
// possible stop-string prefix at the break) is not streamed; (4) the new worker computes the
// prompt again (its prefix cache may hold part of it).
//
// Each migration is logged ("migrating request X after N tokens (attempt k of L): <the lost
// worker's error, naming it>") and counted on tandem_request_migrations_total when a registry is
// given. Resubmissions run on this client's own thread (never inside the inner client's callback),
// after `before_retry` (the frontend refreshes its worker list there, so the dead worker is known
// dead before the inner client picks one).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/engine_client.h"

namespace tandem::metrics {
class Registry;
}

namespace tandem::runtime {

struct MigratingEngineClientOptions {
  int migration_limit = 0;  // resubmissions per request at most; 0: none (errors pass through)
  // Called on the migration thread before each resubmission; may block briefly. Optional.
  std::function<void()> before_retry;
  metrics::Registry* registry = nullptr;  // counts tandem_request_migrations_total; optional
};

class MigratingEngineClient final : public EngineClient {
 public:
  MigratingEngineClient(std::shared_ptr<EngineClient> inner, MigratingEngineClientOptions options);
  // Stops the migration thread: requests waiting for a resubmission finish with kError ("the
  // server is shutting down"); live attempts are the inner client's to end.
  ~MigratingEngineClient() override;

  Status Submit(GenerateRequest request, OutputCallback on_output) override;
  void Cancel(const std::string& request_id) override;
  EngineClientStats Stats() const override;
  ServedModelInfo model_info() const override;

  uint64_t num_migrations() const;  // resubmissions made so far

  struct Impl;

 private:
  std::shared_ptr<EngineClient> inner_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tandem::runtime
