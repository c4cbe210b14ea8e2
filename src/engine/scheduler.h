// Scheduler: continuous batching under a token budget (vLLM v1 shape).
//
// Each step moves requests' num_computed_tokens toward num_tokens; prefill, chunked prefill and
// decode are one mechanism. Order within a step:
//   1. running requests, in admission order: all their uncomputed tokens (1 for decode, the rest of
//      the prompt for chunked prefill) within the remaining budget. When the KV pool has no room,
//      the most recently admitted running request is preempted (its blocks freed; it goes back to
//      the front of the waiting queue and is recomputed later, prompt plus the tokens it already
//      generated, with the help of the prefix cache), possibly the request itself.
//   2. if nothing was preempted: waiting requests in order (FIFO), up to max_num_seqs running:
//      prefix cache lookup, then as much of the rest as the budget allows. The first one that does
//      not fit stops admission (no overtaking). One exception: a request whose cached prefix
//      continues in a slower KV tier (disk) keeps its place but is passed over while those blocks
//      are fetched into the host tier, for at most kv_fetch_wait_ms from its first lookup; the
//      requests behind it are admitted meanwhile.
// A request admitted with blocks still landing from the KV host tier (asynchronous onboarding,
// KVCacheManager::Landing: its own tier hits, or pool blocks another request is onboarding) holds
// its blocks in `onboarding` and gets no compute until they have landed; then, at the start of a
// later Schedule, it joins the running requests (their end), and counts toward max_num_seqs
// meanwhile. Its turn in the queue does not delay the requests behind it.
// A request whose tokens need more blocks than the whole pool is returned in `unfittable` (the
// engine ends it with finish reason "length"); new requests whose prompts cannot fit are refused
// earlier by the engine.
//
// The scheduler does not own requests; it talks to the KVCacheManager only.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"

namespace tandem {

struct SchedulerConfig {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  // Waiting requests with allow_remote_prefill whose uncached prompt is longer than this go to
  // remote prefill at admission (blocks for the whole prompt reserved, no compute).
  int max_local_prefill_tokens = 0;
  // How long a waiting request is held back while its prefix's blocks come up from a slower KV
  // tier (then whatever has not arrived is recomputed).
  int kv_fetch_wait_ms = 1000;
};

struct ScheduledRequest {
  Request* request = nullptr;
  int start_pos = 0;       // num_computed_tokens before this step
  int num_new_tokens = 0;  // tokens [start_pos, start_pos + num_new_tokens) computed this step
  // The slice reaches the end of the known tokens: the step samples a token for this request.
  bool samples = false;
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // the batch, in order
  std::vector<Request*> preempted;
  std::vector<Request*> unfittable;  // removed from the scheduler; the caller finishes them
  std::vector<Request*> remote_prefills;  // admitted this step to await remote KV
  std::vector<Request*> onboarding;       // admitted this step to await their landing blocks
  int num_batched_tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KVCacheManager* kv);

  void AddRequest(Request* request);  // to the back of the waiting queue
  SchedulerOutput Schedule();         // advances num_computed_tokens of the scheduled requests
  // After the model ran the step: registers the newly computed full blocks in the prefix cache.
  void OnStepComputed(const SchedulerOutput& output);
  // Removes a request (finished, aborted, failed) and frees its blocks.
  // Removes the request; frees its blocks unless keep_blocks (the caller frees them later with
  // KVCacheManager::Free).
  void FinishRequest(Request* request, bool keep_blocks = false);
  // A kRemotePrefill request whose KV arrived: its whole prompt is computed (hashes cached) and it
  // runs from now on. A failed remote prefill: it runs, computing what its cached prefix lacks.
  void OnRemotePrefillDone(Request* request);
  void OnRemotePrefillFailed(Request* request);

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_remote_prefill() const { return static_cast<int>(remote_.size()); }
  int num_onboarding() const { return static_cast<int>(onboarding_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool empty() const { return running_.empty() && waiting_.empty() && remote_.empty() && onboarding_.empty(); }
  // Something for Schedule() to do (requests awaiting remote KV need no step; those awaiting
  // landing blocks do: the engine waits for the copies).
  bool has_schedulable() const { return !running_.empty() || !waiting_.empty() || !onboarding_.empty(); }
  uint64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  uint64_t prefix_cache_hits() const { return prefix_cache_hits_; }

 private:
  void Preempt(Request* request);
  // Whether `req` waits (this step) for the lower-tier blocks of `prefix`, starting their fetch.
  bool WaitsForFetch(Request* req, const CachedPrefix& prefix);
  void CountPrefixLookup(Request* request, const CachedPrefix& prefix);

  SchedulerConfig config_;
  KVCacheManager* kv_;
  std::vector<Request*> running_;  // admission order
  std::deque<Request*> waiting_;
  std::vector<Request*> remote_;   // kRemotePrefill, holding blocks
  std::vector<Request*> onboarding_;  // holding landing blocks, in admission order
  // running_, or onboarding_ while it holds a landing block.
  void Run(Request* request);
  uint64_t prefix_cache_queries_ = 0;
  uint64_t prefix_cache_hits_ = 0;
};

}  // namespace tandem
