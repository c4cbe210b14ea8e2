// The synchronous engine step (EngineImpl::StepSync) and what both loops share: the batch of a
// scheduled step and what a scheduling admitted besides it (engine_impl.h).
#include "engine/engine_impl.h"

#include <unordered_set>

namespace tandem::engine_detail {

std::vector<RequestOutput> EngineImpl::StepSync() {
  PublishKvEventsOnReturn publish_kv_events{this};
  std::vector<RequestOutput> outputs = std::move(pending_);
  pending_.clear();
  // What arrived between steps (a remote prefill's first token, aborts) goes out now rather than
  // after the next forward pass: a disaggregated request's TTFT must not include a decode step.
  if (!outputs.empty()) return outputs;

  PhaseClock clock(timeline_);
  if (offloader_) {
    offloader_->Poll();  // blocks the disk tier brought up count from this lookup on
    if (offloader_->onboarding()) CollectLanded(/*wait=*/false, &outputs);
  }
  SchedulerOutput sched = scheduler_.Schedule();
  // Blocks this scheduling evicted are saved, and tier hits copied in (or, asynchronously, their
  // copies started), before any forward pass.
  if (offloader_) {
    const std::vector<kvtier::OnboardBlock> onboard = kv_.TakeOnboard();
    const std::vector<kvtier::EvictedBlock> evicted = kv_.TakeEvicted();
    if (Status st = offloader_->BeforeForward(evicted, onboard); !st.ok()) {
      // Onboarded blocks may hold stale bytes: fail what this step scheduled and drop every
      // cached hash that is free (those requests' blocks included, once freed). Asynchronous:
      // none of this step's onboard copies started; the requests admitted to wait for them fail.
      log::error("kv offload failed: {}", st.ToString());
      FailAdmitted(sched, st, &outputs);
      if (offloader_->async_onboard()) {
        FailLandingHolders(st, &outputs);
        std::vector<int> ids;
        for (const kvtier::OnboardBlock& o : onboard) ids.push_back(o.block_id);
        kv_.MarkLanded(ids);
      }
      kv_.ResetPrefixCache();
      return outputs;
    }
    // A remote prefill's KV is written by the transfer agent, outside the runner's streams: the
    // blocks this scheduling evicted for it leave the pool first (KvOffloader::AwaitEvicted;
    // BeforeForward finished the earlier steps' copies). Otherwise the copies overlap the step.
    if (RemotePrefillTakesEvicted(sched, evicted)) {
      if (Status st = offloader_->AwaitEvicted(); !st.ok()) {
        // The device failed: this step's onboard copies may not have landed either. Landing
        // blocks stay with their flights (CollectLanded fails their holders).
        log::error("kv offload failed: {}", st.ToString());
        FailAdmitted(sched, st, &outputs);
        kv_.ResetPrefixCache();
        return outputs;
      }
    }
  }
  TakeAdmitted(sched, &outputs);
  if (sched.scheduled.empty()) {
    if (outputs.empty() && offloader_) {
      // Nothing to compute: wait for an onboarding or a disk read rather than spin.
      if (offloader_->onboarding()) CollectLanded(/*wait=*/true, &outputs);
      else offloader_->WaitForFetch(2);
    }
    return outputs;
  }
  clock.Lap("schedule");

  // Run the model (BuildBatch says which rows the runner picks).
  StepBatch sb;
  BuildBatch(sched, /*own=*/false, &sb);
  ForwardBatch& batch = sb.batch;
  std::vector<PickSpec>& pick_specs = sb.picks;
  const std::vector<size_t>& masked = sb.masked;
  const size_t num_rows = sb.num_rows, num_samples = sb.num_samples;
  // Layer-wise KV readiness for the requests whose prompt completes in this step.
  std::vector<std::pair<const Entry*, std::span<const int>>> layer_watchers;
  for (size_t i = 0; i < sched.scheduled.size(); ++i) {
    const ScheduledRequest& s = sched.scheduled[i];
    if (s.start_pos + s.num_new_tokens != s.request->num_prompt_tokens) continue;
    const Entry& e = *requests_.at(s.request->request_id);
    if (e.on_layer_kv_ready) layer_watchers.emplace_back(&e, batch.seqs[i].block_table);
  }
  if (!layer_watchers.empty()) {
    batch.on_layer_kv_written = [&layer_watchers](const LayerKVReady& ready) {
      for (const auto& [e, blocks] : layer_watchers) {
        e->on_layer_kv_ready(LayerKVReady{ready.layer, ready.is_ready, blocks});
      }
    };
  }
  // The structured rows' token bitmasks are computed while the forward pass runs on the device
  // (the runner calls this once that is enqueued; about 0.9 ms for 64 rows on the H200 host).
  bool masks_ready = masked.empty();
  if (!masked.empty()) {
    batch.prepare_picks = [&] {
      if (masks_ready) return;
      for (size_t i : masked) {
        pick_specs[i].allowed = requests_.at(sched.scheduled[i].request->request_id)->grammar->Mask();
      }
      masks_ready = true;
    };
  }
  clock.Lap("batch");
  Status st = runner_->Execute(batch, &forward_);
  clock.Lap("execute");
  if (st.ok() && !masks_ready) {  // never sample a structured row unconstrained
    st = Err(StatusCode::kInternal, "the model runner did not call ForwardBatch::prepare_picks");
  }
  const size_t vocab = static_cast<size_t>(model_config().vocab_size);
  if (st.ok() && (forward_.logits.size() != num_rows * vocab ||
                  forward_.samples.size() != num_samples)) {
    st = Err(StatusCode::kInternal,
             "the model runner returned {} logits and {} greedy picks, expected {} x {} and {}",
             forward_.logits.size(), forward_.samples.size(), num_rows, vocab, num_samples);
  }
  if (!st.ok()) {
    log::error("forward pass failed: {}", st.ToString());
    FailScheduled(sched, st, &outputs);
    return outputs;
  }
  scheduler_.OnStepComputed(sched);

  // Sample and post-process.
  size_t row = 0, sample = 0;
  for (size_t i = 0; i < sched.scheduled.size(); ++i) {
    const SequenceSlice::Logits kind = batch.seqs[i].logits;
    if (kind == SequenceSlice::Logits::kNone) continue;
    Entry& e = *requests_.at(sched.scheduled[i].request->request_id);
    if (kind == SequenceSlice::Logits::kPick) {
      ArgmaxSample& pick = forward_.samples[sample++];
      std::optional<TokenLogprob> logprob;
      if (e.request.params.logprobs >= 0) {
        logprob = TokenLogprob{pick.token_id, pick.logprob, std::move(pick.top)};
      }
      outputs.push_back(ProcessToken(e, pick.token_id, std::move(logprob)));
    } else {
      std::span<float> logits(forward_.logits.data() + row * vocab, vocab);
      ++row;
      outputs.push_back(SampleAndProcess(e, logits));
    }
  }
  clock.Lap("post");
  if (timeline_) ++timeline_->steps;
  return outputs;
}

void EngineImpl::TakeAdmitted(const SchedulerOutput& sched, std::vector<RequestOutput>* outputs) {
  for (Request* r : sched.remote_prefills) {
    RemotePrefillTask task;
    task.request_id = r->request_id;
    task.prompt_token_ids.assign(r->token_ids.begin(), r->token_ids.end());
    task.params = r->params;
    task.block_ids = kv_.GetBlockIds(r->request_id);
    task.num_cached_tokens = r->num_computed_tokens;
    task.prefill_worker_id = r->prefill_worker_id;
    task.arrival = r->arrival;
    remote_tasks_.push_back(std::move(task));
  }
  FinishUnfittable(sched, outputs);
}

bool EngineImpl::RemotePrefillTakesEvicted(const SchedulerOutput& sched,
                                           std::span<const kvtier::EvictedBlock> evicted) {
  if (sched.remote_prefills.empty() || evicted.empty()) return false;
  std::unordered_set<int> ids;
  for (const kvtier::EvictedBlock& e : evicted) ids.insert(e.block_id);
  for (const Request* r : sched.remote_prefills) {
    for (int b : kv_.GetBlockIds(r->request_id)) {
      if (ids.count(b) != 0) return true;
    }
  }
  return false;
}

void EngineImpl::FailAdmitted(const SchedulerOutput& sched, const Status& st, std::vector<RequestOutput>* outputs) {
  FailScheduled(sched, st, outputs);
  for (const Request* r : sched.remote_prefills) FailRequest(r->request_id, st, outputs);
  FinishUnfittable(sched, outputs);
}

void EngineImpl::FinishUnfittable(const SchedulerOutput& sched, std::vector<RequestOutput>* outputs) {
  for (Request* r : sched.unfittable) {
    // Its tokens need more KV blocks than the pool has: the effective context limit.
    log::warn("request {}: {} tokens need more than the {} KV blocks of the pool; stopping",
              r->request_id, r->num_tokens(), kv_.num_blocks());
    outputs->push_back(Finish(r->request_id, FinishReason::kLength));
  }
}

void EngineImpl::BuildBatch(const SchedulerOutput& sched, bool own, StepBatch* b) {
  const size_t n = sched.scheduled.size();
  ForwardBatch& batch = b->batch;
  batch.seqs.reserve(n);
  const bool device_sampling = runner_->SamplesOnDevice();
  b->picks.resize(n);  // sized once: slices point into them
  b->penalties.resize(n);
  if (own) {
    b->tokens.resize(n);
    b->tables.resize(n);
  }
  for (size_t i = 0; i < sched.scheduled.size(); ++i) {
    const ScheduledRequest& s = sched.scheduled[i];
    SequenceSlice slice;
    slice.token_ids =
        std::span<const int32_t>(s.request->token_ids).subspan(s.start_pos, s.num_new_tokens);
    slice.start_pos = s.start_pos;
    slice.block_table = kv_.GetBlockIds(s.request->request_id);
    if (own) {
      b->tokens[i].assign(slice.token_ids.begin(), slice.token_ids.end());
      b->tables[i].assign(slice.block_table.begin(), slice.block_table.end());
      slice.token_ids = b->tokens[i];
      slice.block_table = b->tables[i];
    }
    slice.logits = SequenceSlice::Logits::kNone;
    const SamplingParams& sp = s.request->params;
    // A structured output's row: on a device-sampling runner a kPick whose PickSpec carries the
    // grammar's token bitmask (PickSpec::allowed), unless it wants log-probabilities (those
    // rows, and every row of a host runner, are masked on the host: GrammarState::ApplyMask).
    const bool structured = Structured(sp);
    if (s.samples && (device_sampling || PickedByRunner(sp)) && (!structured || sp.logprobs < 0)) {
      slice.logits = SequenceSlice::Logits::kPick;
      // ComputeLogprobs clamps the count to the vocabulary; Execute refuses more.
      slice.num_logprobs = std::min(sp.logprobs, model_config().vocab_size);
      ++b->num_samples;
      if (!PickedByRunner(sp)) {
        PickSpec& pick = b->picks[i];
        pick.sample = ToSampleSpec(sp);
        pick.repetition_penalty = sp.repetition_penalty;
        pick.frequency_penalty = sp.frequency_penalty;
        pick.presence_penalty = sp.presence_penalty;
        if (sp.temperature > 0.0f) pick.u = UniformDouble(s.request->generator);
        if (pick.has_penalties()) {
          b->penalties[i] = cpu::MakePenaltyEntries(s.request->prompt_token_ids(),
                                                   s.request->output_token_ids(),
                                                   model_config().vocab_size);
          pick.penalties = b->penalties[i];
        }
        if (structured) b->masked.push_back(i);  // its mask: prepare_picks, below
        slice.pick = &pick;
      }
    } else if (s.samples) {
      slice.logits = SequenceSlice::Logits::kLast;
      ++b->num_rows;
    }
    batch.seqs.push_back(slice);
  }
}

}  // namespace tandem::engine_detail
