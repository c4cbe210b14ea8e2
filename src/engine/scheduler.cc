#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <utility>

#include "engine/block_hash.h"

namespace tandem {

Scheduler::Scheduler(const SchedulerConfig& config, KVCacheManager* kv) : config_(config), kv_(kv) {}

void Scheduler::AddRequest(Request* request) {
  request->status = RequestStatus::kWaiting;
  waiting_.push_back(request);
}

void Scheduler::Preempt(Request* request) {
  kv_->Free(request->request_id);
  request->num_computed_tokens = 0;
  request->status = RequestStatus::kPreempted;
  ++request->num_preemptions;
  waiting_.push_front(request);
}

bool Scheduler::WaitsForFetch(Request* req, const CachedPrefix& prefix) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (req->fetch_deadline_ns == 0) {
    req->fetch_deadline_ns = now + int64_t{config_.kv_fetch_wait_ms} * 1'000'000;
  }
  if (now >= req->fetch_deadline_ns) return false;  // waited enough: the rest is recomputed
  return kv_->FetchLowerTier(prefix, req->block_hashes) > 0;
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  auto update_hashes = [&](Request* r) {
    // Full blocks of known tokens only (a pending token's block is hashed once it is sampled).
    if (kv_->prefix_caching()) ExtendBlockHashes(r->known_token_ids(), kv_->block_size(), &r->block_hashes);
  };

  // 0. Requests whose onboarded blocks have landed run from now on.
  for (size_t i = 0; i < onboarding_.size();) {
    if (kv_->Landing(onboarding_[i]->request_id)) {
      ++i;
      continue;
    }
    running_.push_back(onboarding_[i]);
    onboarding_.erase(onboarding_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // 1. Running requests.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* req = running_[i];
    if (kv_->BlocksFor(req->num_tokens()) > kv_->num_blocks()) {
      kv_->Free(req->request_id);
      running_.erase(running_.begin() + i);
      req->status = RequestStatus::kFinished;
      out.unfittable.push_back(req);
      continue;
    }
    const int num_new = std::min(req->num_tokens() - req->num_computed_tokens, budget);
    if (num_new <= 0) {
      ++i;
      continue;
    }
    bool scheduled = true;
    while (!kv_->AllocateSlots(req->request_id, req->num_computed_tokens + num_new)) {
      Request* victim = running_.back();
      running_.pop_back();
      Preempt(victim);
      out.preempted.push_back(victim);
      if (victim == req) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;  // req was the last running one
    update_hashes(req);
    out.scheduled.push_back({req, req->num_computed_tokens, num_new});
    budget -= num_new;
    ++i;
  }

  // 2. Waiting requests, unless this step had to preempt (a request waiting for its prefix's
  //    blocks from a slower tier keeps its place; w then moves past it).
  for (size_t w = 0; out.preempted.empty() && w < waiting_.size() && budget > 0 &&
                     static_cast<int>(running_.size() + remote_.size() + onboarding_.size()) <
                         config_.max_num_seqs;) {
    Request* req = waiting_[w];
    if (kv_->BlocksFor(req->num_tokens()) > kv_->num_blocks()) {
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
      req->status = RequestStatus::kFinished;
      out.unfittable.push_back(req);
      continue;
    }
    update_hashes(req);
    CachedPrefix prefix = kv_->FindCachedPrefix(req->block_hashes, req->num_tokens());
    if (prefix.lower_tier_blocks > 0) {
      if (WaitsForFetch(req, prefix)) {
        ++w;
        continue;
      }
      // Not waiting (any more): look again, since a fetch just now may have moved the tiers.
      prefix = kv_->FindCachedPrefix(req->block_hashes, req->num_tokens());
    }
    if (req->allow_remote_prefill && req->num_output_tokens() == 0 &&
        req->num_tokens() - prefix.num_tokens > config_.max_local_prefill_tokens) {
      // Disaggregated: reserve the whole prompt's blocks; a prefill worker fills them.
      if (!kv_->AllocateSlots(req->request_id, req->num_tokens(), &prefix)) break;
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
      CountPrefixLookup(req, prefix);
      req->fetch_deadline_ns = 0;
      req->num_computed_tokens = prefix.num_tokens;
      req->status = RequestStatus::kRemotePrefill;
      remote_.push_back(req);
      out.remote_prefills.push_back(req);
      continue;
    }
    const int num_new = std::min(req->num_tokens() - prefix.num_tokens, budget);
    if (!kv_->AllocateSlots(req->request_id, prefix.num_tokens + num_new, &prefix)) break;
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    CountPrefixLookup(req, prefix);
    req->fetch_deadline_ns = 0;
    req->num_computed_tokens = prefix.num_tokens;
    req->status = RequestStatus::kRunning;
    if (kv_->Landing(req->request_id)) {  // computed once its prefix's KV is in the pool
      onboarding_.push_back(req);
      out.onboarding.push_back(req);
      continue;
    }
    running_.push_back(req);
    out.scheduled.push_back({req, req->num_computed_tokens, num_new});
    budget -= num_new;
  }

  for (ScheduledRequest& s : out.scheduled) {
    s.request->num_computed_tokens += s.num_new_tokens;
    s.samples = s.request->num_computed_tokens == s.request->num_tokens();
    out.num_batched_tokens += s.num_new_tokens;
  }
  return out;
}

void Scheduler::OnStepComputed(const SchedulerOutput& output) {
  for (const ScheduledRequest& s : output.scheduled) {
    if (s.request->status != RequestStatus::kRunning) continue;
    kv_->CacheComputedBlocks(s.request->request_id, s.request->block_hashes,
                             s.request->num_computed_tokens);
  }
}

void Scheduler::CountPrefixLookup(Request* req, const CachedPrefix& prefix) {
  if (req->num_cached_tokens >= 0) return;  // counted at its first admission only
  req->num_cached_tokens = prefix.num_tokens;
  prefix_cache_queries_ += static_cast<uint64_t>(req->num_prompt_tokens);
  prefix_cache_hits_ += static_cast<uint64_t>(prefix.num_tokens);
}

void Scheduler::FinishRequest(Request* request, bool keep_blocks) {
  auto r = std::find(running_.begin(), running_.end(), request);
  if (r != running_.end()) running_.erase(r);
  auto w = std::find(waiting_.begin(), waiting_.end(), request);
  if (w != waiting_.end()) waiting_.erase(w);
  auto m = std::find(remote_.begin(), remote_.end(), request);
  if (m != remote_.end()) remote_.erase(m);
  auto o = std::find(onboarding_.begin(), onboarding_.end(), request);
  if (o != onboarding_.end()) onboarding_.erase(o);
  if (!keep_blocks) kv_->Free(request->request_id);
  request->status = RequestStatus::kFinished;
}

void Scheduler::OnRemotePrefillDone(Request* request) {
  auto m = std::find(remote_.begin(), remote_.end(), request);
  if (m == remote_.end()) return;
  remote_.erase(m);
  request->num_computed_tokens = request->num_prompt_tokens;
  if (kv_->prefix_caching()) {
    ExtendBlockHashes(request->token_ids, kv_->block_size(), &request->block_hashes);
    kv_->CacheComputedBlocks(request->request_id, request->block_hashes,
                             request->num_computed_tokens);
  }
  Run(request);
}

void Scheduler::Run(Request* request) {
  request->status = RequestStatus::kRunning;
  if (kv_->Landing(request->request_id)) {
    onboarding_.push_back(request);
  } else {
    running_.push_back(request);
  }
}

void Scheduler::OnRemotePrefillFailed(Request* request) {
  auto m = std::find(remote_.begin(), remote_.end(), request);
  if (m == remote_.end()) return;
  remote_.erase(m);
  // Its blocks stay: the cached prefix is valid, the rest is recomputed over whatever arrived.
  request->allow_remote_prefill = false;
  Run(request);
}

}  // namespace tandem
