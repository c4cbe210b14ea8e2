// The overlapped engine loop (EngineConfig::async_scheduling; vLLM's async scheduling, SGLang's
// overlap scheduler). One Step():
//   1. schedule step N+1 from the predicted state: every request of step N that samples holds a
//      kPendingTokenId at the end of its token ids, so the scheduler gives it its next decode row;
//   2. collect step N from the forward thread: its sampled tokens replace the pending ones (host
//      rows are sampled here), and EOS, stop ids, the grammar and the length end requests now;
//   3. launch step N+1 on the forward thread without the rows of requests that ended in 2 (its
//      batch is a copy: token ids, block tables and bitmasks are its own);
//   4. post-process step N while N+1 runs: detokenization and stop strings. A request a stop string
//      ends here computed one wasted row of N+1, whose result Collect drops; its blocks are freed
//      at once (the forward thread runs the steps in order, so whatever N+1 writes into them lands
//      before any later step reads them).
// Outputs are the synchronous loop's, token for token: a request's randomness is drawn in the same
// order (u at BuildBatch, host sampling at Collect, both after the previous token is known).
// Steps run synchronously (the in-flight one collected first) while a KV offload tier, a step
// timeline or a request with layer-wise KV callbacks is present: those touch the runner or the
// KV pool from the engine thread during a step.
#include "engine/engine_impl.h"

#include "engine/block_hash.h"

#include <tuple>

namespace tandem::engine_detail {

bool EngineImpl::OverlapPossible() const {
  if (offloader_ || timeline_) return false;
  for (const auto& [id, e] : requests_) {
    if (e->on_layer_kv_ready) return false;
  }
  return true;
}

EngineImpl::Entry* EngineImpl::FindEntry(const std::string& request_id, uint64_t serial) {
  auto it = requests_.find(request_id);
  return it != requests_.end() && it->second->serial == serial ? it->second.get() : nullptr;
}

std::vector<RequestOutput> EngineImpl::StepOverlapped() {
  const bool overlap = OverlapPossible();
  if (!overlap && !inflight_) return StepSync();
  PublishKvEventsOnReturn publish_kv_events{this};
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  if (!outputs.empty()) return outputs;  // as StepSync: aborts and remote first tokens at once

  std::vector<DeferredText> deferred;
  if (!overlap) {  // drain: the next Step runs synchronously
    Collect(&outputs, &deferred);
    FinishTexts(&deferred, &outputs);
    return outputs;
  }
  // 1. The next step, from the predicted state.
  SchedulerOutput sched = scheduler_.Schedule();
  TakeAdmitted(sched, &outputs);
  std::vector<std::pair<std::string, uint64_t>> ids;  // to find them again after Collect
  ids.reserve(sched.scheduled.size());
  for (const ScheduledRequest& s : sched.scheduled) {
    ids.emplace_back(s.request->request_id, requests_.at(s.request->request_id)->serial);
  }
  // 2. The step in flight.
  const bool collected = Collect(&outputs, &deferred);
  // 3. The next step without the requests that ended in 2 (their Request objects are gone: only
  //    the ids are looked at).
  size_t kept = 0;
  for (size_t i = 0; i < sched.scheduled.size(); ++i) {
    if (FindEntry(ids[i].first, ids[i].second) == nullptr) continue;
    sched.scheduled[kept++] = sched.scheduled[i];
  }
  sched.scheduled.resize(kept);
  if (!collected) {
    // A failed forward pass: its blocks may have been matched as a cached prefix by this
    // scheduling, so what it scheduled fails too.
    FailScheduled(sched, Status(StatusCode::kInternal, "the previous forward pass failed"), &outputs);
  } else if (!sched.scheduled.empty()) {
    Launch(std::move(sched), &outputs);
  }
  // 4. The collected step's text, while the next one runs.
  FinishTexts(&deferred, &outputs);
  return outputs;
}

void EngineImpl::FinishTexts(std::vector<DeferredText>* deferred, std::vector<RequestOutput>* outputs) {
  for (DeferredText& d : *deferred) {
    if (Entry* e = FindEntry(d.request_id, d.serial)) outputs->push_back(FinishText(*e, std::move(d)));
  }
}

void EngineImpl::Launch(SchedulerOutput sched, std::vector<RequestOutput>* outputs) {
  auto f = std::make_unique<InFlight>();
  BuildBatch(sched, /*own=*/true, &f->sb);
  const size_t n = sched.scheduled.size();
  // Every token of the batch is known by now (Collect replaced the pending ones).
  for (size_t i = 0; i < n; ++i) {
    for (int32_t t : f->sb.tokens[i]) {
      if (t != kPendingTokenId) continue;
      const Status st = Err(StatusCode::kInternal, "request {}: a step would compute a token not yet sampled",
                            sched.scheduled[i].request->request_id);
      log::error("{}", st.ToString());
      FailScheduled(sched, st, outputs);
      return;
    }
  }
  // The masked rows' bitmasks now, copied: the grammar states change while the step runs.
  f->sb.masks.resize(n);
  for (size_t i : f->sb.masked) {
    const std::span<const uint32_t> mask = requests_.at(sched.scheduled[i].request->request_id)->grammar->Mask();
    f->sb.masks[i].assign(mask.begin(), mask.end());
    f->sb.picks[i].allowed = f->sb.masks[i];
  }
  f->rows.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Request& r = *sched.scheduled[i].request;
    f->rows[i] = InFlightRow{r.request_id, requests_.at(r.request_id)->serial, f->sb.batch.seqs[i].logits, -1};
  }
  // The blocks that the tokens Collect just placed made full are hashed (the scheduler hashes
  // up to a pending token only), then everything this step computes counts as computed.
  if (kv_.prefix_caching()) {
    for (const ScheduledRequest& s : sched.scheduled) {
      ExtendBlockHashes(s.request->token_ids, kv_.block_size(), &s.request->block_hashes);
    }
  }
  scheduler_.OnStepComputed(sched);
  // The predicted state: each sampling request one token further, unless that token ends it by
  // length whatever it is (then no row of the next step is planned for it).
  for (size_t i = 0; i < n; ++i) {
    const ScheduledRequest& s = sched.scheduled[i];
    if (!s.samples) continue;
    Request& r = *s.request;
    if (r.num_output_tokens() + 1 >= r.params.max_tokens || r.num_tokens() + 1 >= config_.max_model_len) continue;
    r.token_ids.push_back(kPendingTokenId);
    f->rows[i].pending_index = r.num_tokens() - 1;
  }
  InFlight* job = f.get();
  inflight_ = std::move(f);
  worker_.Submit([this, job] { job->status = runner_->Execute(job->sb.batch, &job->out); });
}

bool EngineImpl::Collect(std::vector<RequestOutput>* outputs, std::vector<DeferredText>* deferred) {
  if (!inflight_) return true;
  worker_.Wait();
  std::unique_ptr<InFlight> f = std::move(inflight_);
  Status st = f->status;
  const size_t vocab = static_cast<size_t>(model_config().vocab_size);
  if (st.ok() && (f->out.logits.size() != f->sb.num_rows * vocab || f->out.samples.size() != f->sb.num_samples)) {
    st = Err(StatusCode::kInternal,
             "the model runner returned {} logits and {} greedy picks, expected {} x {} and {}",
             f->out.logits.size(), f->out.samples.size(), f->sb.num_rows, vocab, f->sb.num_samples);
  }
  if (!st.ok()) {
    log::error("forward pass failed: {}", st.ToString());
    for (const InFlightRow& row : f->rows) {
      if (FindEntry(row.request_id, row.serial) == nullptr) continue;
      RequestOutput out = Finish(row.request_id, FinishReason::kError);
      out.error = st.ToString();
      outputs->push_back(std::move(out));
    }
    // Its blocks were registered in the prefix cache at the launch: drop every free cached hash.
    kv_.ResetPrefixCache();
    return false;
  }
  size_t logits_row = 0, sample = 0;
  for (const InFlightRow& row : f->rows) {
    if (row.kind == SequenceSlice::Logits::kNone) continue;
    Entry* e = FindEntry(row.request_id, row.serial);
    int32_t token = 0;
    std::optional<TokenLogprob> logprob;
    if (row.kind == SequenceSlice::Logits::kPick) {
      ArgmaxSample& pick = f->out.samples[sample++];
      if (e == nullptr) continue;  // aborted, or ended by a stop string, while the step ran
      token = pick.token_id;
      if (e->request.params.logprobs >= 0) logprob = TokenLogprob{pick.token_id, pick.logprob, std::move(pick.top)};
    } else {
      std::span<float> logits(f->out.logits.data() + logits_row * vocab, vocab);
      ++logits_row;
      if (e == nullptr) continue;
      std::span<const int32_t> output_ids = e->request.output_token_ids();
      if (row.pending_index >= 0) output_ids = output_ids.first(output_ids.size() - 1);  // before this token
      std::tie(token, logprob) = SampleHostRow(*e, logits, output_ids);
    }
    std::vector<int32_t>& ids = e->request.token_ids;
    if (row.pending_index >= 0) {
      if (static_cast<size_t>(row.pending_index) >= ids.size() || ids[row.pending_index] != kPendingTokenId) {
        log::error("request {}: its pending token moved", row.request_id);  // a bug; never a wrong token
        RequestOutput err = Finish(row.request_id, FinishReason::kError);
        err.error = "internal error: the overlapped engine loop lost a pending token";
        outputs->push_back(std::move(err));
        continue;
      }
      ids[static_cast<size_t>(row.pending_index)] = token;
    } else {
      ids.push_back(token);
    }
    DeferredText d;
    std::optional<RequestOutput> out = ProcessAppended(*e, std::move(logprob), &d);
    if (out) {
      outputs->push_back(std::move(*out));
    } else {
      deferred->push_back(std::move(d));
    }
  }
  return true;
}

RequestOutput EngineImpl::FinishText(Entry& e, DeferredText d) {
  if (!e.text) return std::move(d.out);
  StopStringMatcher::Result t = e.text->Push(d.token);
  d.out.new_text = std::move(t.text);
  if (!t.stopped) return std::move(d.out);
  // A stop string ends it (Finish drops the pending token of the step in flight).
  RequestOutput last = Finish(e.request.request_id, FinishReason::kStop);  // e is gone from here on
  d.out.held_block_ids = std::move(last.held_block_ids);
  d.out.finished = true;
  d.out.finish_reason = FinishReason::kStop;
  return std::move(d.out);
}

}  // namespace tandem::engine_detail
