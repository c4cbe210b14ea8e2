// EngineImpl, the Engine of engine.cc (Engine::Create): its request table, scheduler, KV cache
// manager and the step loop (schedule -> run model -> sample -> post-process). Included only by
// the engine's own .cc files.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "common/logging.h"
#include "engine/engine.h"
#include "engine/grammar_state.h"
#include "engine/kv_cache_manager.h"
#include "engine/kv_offload_setup.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/text_stream.h"

namespace tandem::engine_detail {

// Rows whose token is the plain argmax of the model's logits (SampleToken's temperature 0 without
// ApplyPenalties), so ModelRunner::Execute may pick it (kPick without a PickSpec, the same tie
// rule and logprobs as sampler.h). Other rows need the host sampler, or a PickSpec when the
// runner samples on its device.
inline bool Structured(const SamplingParams& p) {
  return p.structured.kind != grammar::StructuredKind::kNone;
}

inline bool PickedByRunner(const SamplingParams& p) {
  return p.temperature <= 0.0f && p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f &&
         p.presence_penalty == 0.0f && !Structured(p);
}

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<ModelRunner> runner, std::shared_ptr<const Tokenizer> tokenizer,
             const EngineConfig& config, int num_blocks)
      : runner_(std::move(runner)),
        tokenizer_(std::move(tokenizer)),
        config_(config),
        kv_(num_blocks, config.block_size, config.enable_prefix_caching),
        scheduler_(SchedulerConfig{config.max_num_seqs, config.max_num_batched_tokens,
                                   config.max_local_prefill_tokens, config.kv_offload_disk_wait_ms},
                   &kv_),
        global_generator_(std::random_device{}()) {
    // The model's EOS ids (config.json, generation_config.json) and the tokenizer's
    // end-of-generation tokens (e.g. Qwen's <|endoftext|> besides <|im_end|>).
    for (int id : runner_->config().eos_token_ids) eos_ids_.push_back(id);
    if (tokenizer_) {
      for (int32_t id : EndOfGenerationTokenIds(*tokenizer_)) {
        if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
      }
    }
    grammar_ = std::make_unique<GrammarRuntime>(tokenizer_, eos_ids_);
    SetUpOffload();
  }

  // Finishes every request the step scheduled with `st` as its error.
  void FailScheduled(const SchedulerOutput& sched, const Status& st, std::vector<RequestOutput>* outputs) {
    for (const ScheduledRequest& s : sched.scheduled) {
      RequestOutput out = Finish(s.request->request_id, FinishReason::kError);
      out.error = st.ToString();
      outputs->push_back(std::move(out));
    }
  }

  void SetUpOffload() {
    offloader_ = MakeKvOffloader(config_, *runner_);
    if (offloader_) kv_.SetTier(offloader_->index());
  }

  Status ValidateRequest(const std::vector<int32_t>& prompt_token_ids,
                         const SamplingParams& params) const override {
    const int vocab = model_config().vocab_size;
    if (prompt_token_ids.empty()) return Status(StatusCode::kInvalidArgument, "the prompt is empty");
    for (size_t i = 0; i < prompt_token_ids.size(); ++i) {
      const int32_t id = prompt_token_ids[i];
      if (id < 0 || id >= vocab) {
        return Err(StatusCode::kInvalidArgument,
                   "prompt token {} at position {} is outside the vocabulary [0, {})", id, i, vocab);
      }
    }
    const int num_prompt = static_cast<int>(prompt_token_ids.size());
    if (num_prompt > config_.max_model_len) {
      return Err(StatusCode::kInvalidArgument,
                 "the prompt has {} tokens, more than max_model_len {}", num_prompt,
                 config_.max_model_len);
    }
    TANDEM_RETURN_IF_ERROR(ValidateSamplingParams(params, vocab, tokenizer_ != nullptr));
    if (Structured(params)) {
      if (params.structured_prefix_tokens < 0 || params.structured_prefix_tokens >= num_prompt) {
        return Err(StatusCode::kInvalidArgument, "structured_prefix_tokens {} is outside [0, {})",
                   params.structured_prefix_tokens, num_prompt);
      }
      TANDEM_RETURN_IF_ERROR(grammar_->Check(params.structured));
    }
    if (kv_.BlocksFor(num_prompt) > kv_.num_blocks()) {
      return Err(StatusCode::kInvalidArgument,
                 "the prompt has {} tokens, which need {} KV blocks of {} tokens, but the KV pool "
                 "has only {} blocks",
                 num_prompt, kv_.BlocksFor(num_prompt), config_.block_size, kv_.num_blocks());
    }
    return Status::Ok();
  }

  Status AddRequest(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                    const SamplingParams& params) override {
    return AddRequest(request_id, std::move(prompt_token_ids), params, RequestOptions{});
  }

  Status AddRequest(const std::string& request_id, std::vector<int32_t> prompt_token_ids,
                    const SamplingParams& params, const RequestOptions& options) override {
    if (requests_.count(request_id) || held_.count(request_id)) {
      return Err(StatusCode::kInvalidArgument, "duplicate request id '{}'", request_id);
    }
    TANDEM_RETURN_IF_ERROR(ValidateRequest(prompt_token_ids, params));
    const int num_prompt = static_cast<int>(prompt_token_ids.size());

    auto entry = std::make_unique<Entry>();
    Request& r = entry->request;
    r.request_id = request_id;
    r.token_ids = std::move(prompt_token_ids);
    r.num_prompt_tokens = num_prompt;
    r.params = params;
    r.allow_remote_prefill = options.allow_remote_prefill;
    r.hold_blocks = options.hold_blocks;
    r.prefill_worker_id = options.prefill_worker_id;
    r.arrival = options.arrival;
    entry->on_layer_kv_ready = options.on_layer_kv_ready;
    // Seeded: its own stream, whatever else runs. Unseeded: a seed from the engine's generator.
    r.generator.seed(params.seed ? *params.seed : global_generator_());
    if (tokenizer_) entry->text = std::make_unique<TextStream>(tokenizer_, params);
    if (Structured(params)) {
      std::span<const int32_t> prefix(r.token_ids);
      prefix = prefix.subspan(prefix.size() - static_cast<size_t>(params.structured_prefix_tokens));
      auto state = grammar_->Start(params.structured, prefix, /*allow_stop=*/!params.ignore_eos);
      if (!state.ok()) return state.status();
      entry->grammar = std::move(*state);
    }
    scheduler_.AddRequest(&r);
    requests_.emplace(request_id, std::move(entry));
    return Status::Ok();
  }

  void AbortRequest(const std::string& request_id) override {
    auto it = requests_.find(request_id);
    if (it == requests_.end()) return;
    Entry& e = *it->second;
    scheduler_.FinishRequest(&e.request);
    RequestOutput out = BaseOutput(e);
    out.finished = true;
    out.finish_reason = FinishReason::kAbort;
    pending_.push_back(std::move(out));
    requests_.erase(it);
  }

  std::vector<RequestOutput> Step() override {
    struct PublishOnReturn {  // KV events of this step, whichever way it returns
      EngineImpl* self;
      ~PublishOnReturn() { self->PublishKvEvents(); }
    } publish_kv_events{this};
    std::vector<RequestOutput> outputs = std::move(pending_);
    pending_.clear();
    // What arrived between steps (a remote prefill's first token, aborts) goes out now rather than
    // after the next forward pass: a disaggregated request's TTFT must not include a decode step.
    if (!outputs.empty()) return outputs;

    PhaseClock clock(timeline_);
    if (offloader_) offloader_->Poll();  // blocks the disk tier brought up count from this lookup on
    SchedulerOutput sched = scheduler_.Schedule();
    // Blocks this scheduling evicted are saved, and tier hits copied in, before any forward pass.
    if (offloader_) {
      if (Status st = offloader_->BeforeForward(kv_.TakeEvicted(), kv_.TakeOnboard()); !st.ok()) {
        // Onboarded blocks may hold stale bytes: fail what this step scheduled and drop every
        // cached hash that is free (those requests' blocks included, once freed).
        log::error("kv offload failed: {}", st.ToString());
        FailScheduled(sched, st, &outputs);
        kv_.ResetPrefixCache();
        return outputs;
      }
    }
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
    for (Request* r : sched.unfittable) {
      // Its tokens need more KV blocks than the pool has: the effective context limit.
      log::warn("request {}: {} tokens need more than the {} KV blocks of the pool; stopping",
                r->request_id, r->num_tokens(), kv_.num_blocks());
      outputs.push_back(Finish(r->request_id, FinishReason::kLength));
    }
    if (sched.scheduled.empty()) {
      if (outputs.empty() && offloader_) offloader_->WaitForFetch(2);  // disk reads: no spinning
      return outputs;
    }
    clock.Lap("schedule");

    // Run the model. Greedy rows without penalties are picked by the runner (kPick: on a GPU the
    // logits stay there). On a runner that samples on its device every other row is a kPick too,
    // with a PickSpec: the engine keeps the randomness (the row's one uniform u drawn here, as
    // SampleToken would) and sends penalized rows' prompt + output ids as unique ids with output
    // counts (O(prompt + output) per row and step). On a host runner they come back as logits
    // for the host sampler (the same tokens: both follow SampleTokenWithUniform).
    ForwardBatch batch;
    batch.seqs.reserve(sched.scheduled.size());
    size_t num_rows = 0, num_samples = 0;
    const bool device_sampling = runner_->SamplesOnDevice();
    std::vector<PickSpec> pick_specs(sched.scheduled.size());  // sized once: slices point into it
    std::vector<std::vector<cpu::PenaltyEntry>> penalty_ids(sched.scheduled.size());
    std::vector<size_t> masked;  // the structured rows picked by the runner
    for (size_t i = 0; i < sched.scheduled.size(); ++i) {
      const ScheduledRequest& s = sched.scheduled[i];
      SequenceSlice slice;
      slice.token_ids =
          std::span<const int32_t>(s.request->token_ids).subspan(s.start_pos, s.num_new_tokens);
      slice.start_pos = s.start_pos;
      slice.block_table = kv_.GetBlockIds(s.request->request_id);
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
        ++num_samples;
        if (!PickedByRunner(sp)) {
          PickSpec& pick = pick_specs[i];
          pick.sample = ToSampleSpec(sp);
          pick.repetition_penalty = sp.repetition_penalty;
          pick.frequency_penalty = sp.frequency_penalty;
          pick.presence_penalty = sp.presence_penalty;
          if (sp.temperature > 0.0f) pick.u = UniformDouble(s.request->generator);
          if (pick.has_penalties()) {
            penalty_ids[i] = cpu::MakePenaltyEntries(s.request->prompt_token_ids(),
                                                     s.request->output_token_ids(),
                                                     model_config().vocab_size);
            pick.penalties = penalty_ids[i];
          }
          if (structured) masked.push_back(i);  // its mask: prepare_picks, below
          slice.pick = &pick;
        }
      } else if (s.samples) {
        slice.logits = SequenceSlice::Logits::kLast;
        ++num_rows;
      }
      batch.seqs.push_back(slice);
    }
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

  void SetStepTimeline(StepTimeline* timeline) override {
    timeline_ = timeline;
    runner_->SetStepTimeline(timeline);
  }

  bool HasUnfinishedRequests() const override {
    return scheduler_.has_schedulable() || !pending_.empty();
  }

  std::vector<RemotePrefillTask> TakeRemotePrefillTasks() override {
    std::vector<RemotePrefillTask> tasks;
    tasks.swap(remote_tasks_);
    return tasks;
  }

  Status CompleteRemotePrefill(const std::string& request_id, int32_t first_token,
                               const std::vector<TokenLogprob>& logprobs) override {
    Entry* e = AwaitingRemote(request_id);
    if (!e) return Err(StatusCode::kNotFound, "request {} is not awaiting remote KV", request_id);
    if (first_token < 0 || first_token >= model_config().vocab_size) {
      return Err(StatusCode::kInvalidArgument, "first token {} is outside the vocabulary",
                 first_token);
    }
    scheduler_.OnRemotePrefillDone(&e->request);
    // The prefill worker drew this token from the same seed: keep the generator in step.
    if (e->request.params.temperature > 0.0f) e->request.generator.discard(1);
    std::optional<TokenLogprob> logprob;
    if (!logprobs.empty()) logprob = logprobs.front();
    pending_.push_back(ProcessToken(*e, first_token, std::move(logprob)));
    return Status::Ok();
  }

  Status FailRemotePrefill(const std::string& request_id) override {
    Entry* e = AwaitingRemote(request_id);
    if (!e) return Err(StatusCode::kNotFound, "request {} is not awaiting remote KV", request_id);
    scheduler_.OnRemotePrefillFailed(&e->request);
    return Status::Ok();
  }

  void ReleaseHeldBlocks(const std::string& request_id) override {
    if (held_.erase(request_id)) kv_.Free(request_id);
  }

  EngineStats Stats() const override {
    EngineStats s;
    s.num_running = scheduler_.num_running() + scheduler_.num_remote_prefill();
    s.num_waiting = scheduler_.num_waiting();
    s.num_kv_blocks_total = kv_.num_blocks();
    s.num_kv_blocks_used = kv_.num_used_blocks();
    s.prefix_cache_queries = scheduler_.prefix_cache_queries();
    s.prefix_cache_hits = scheduler_.prefix_cache_hits();
    if (offloader_) AddOffloadStats(*offloader_, &s);
    return s;
  }

  const ModelConfig& model_config() const override { return runner_->config(); }
  const EngineConfig& config() const override { return config_; }
  KVCacheLayout kv_cache_layout() const override { return runner_->kv_cache_layout(); }

  void SetKvEventSink(std::shared_ptr<KvEventSink> sink) override {
    kv_.EnableEvents();
    kv_event_sink_ = std::move(sink);
  }

  KvCacheSnapshot SnapshotCachedBlocks() override {
    PublishKvEvents();
    KvCacheSnapshot snapshot = kv_.Snapshot();
    snapshot.load = KvLoadNow();
    return snapshot;
  }

 private:
  KvLoad KvLoadNow() const {
    const EngineStats s = Stats();
    return KvLoad{s.num_kv_blocks_used, s.num_kv_blocks_total, s.num_waiting, s.num_running};
  }
  void PublishKvEvents() {
    if (!kv_.events_enabled()) return;
    std::vector<KvEvent> events = kv_.TakeEvents();
    if (kv_event_sink_) kv_event_sink_->OnStep(KvEventBatch{std::move(events), KvLoadNow()});
  }

  struct Entry {
    Request request;
    std::unique_ptr<TextStream> text;  // null without a tokenizer
    std::unique_ptr<GrammarState> grammar;  // a structured output's (sampling_params.h)
    std::function<void(const LayerKVReady&)> on_layer_kv_ready;  // RequestOptions
  };

  RequestOutput BaseOutput(const Entry& e) const {
    RequestOutput out;
    out.request_id = e.request.request_id;
    out.num_prompt_tokens = e.request.num_prompt_tokens;
    out.num_cached_tokens = std::max(0, e.request.num_cached_tokens);
    out.num_output_tokens = e.request.num_output_tokens();
    return out;
  }

  // Ends a request: frees its blocks, flushes its text, forgets it.
  RequestOutput Finish(const std::string& request_id, FinishReason reason) {
    auto it = requests_.find(request_id);
    Entry& e = *it->second;
    const bool hold = e.request.hold_blocks && reason != FinishReason::kError &&
                      reason != FinishReason::kAbort;
    RequestOutput out = BaseOutput(e);
    if (hold) {
      out.held_block_ids = kv_.GetBlockIds(request_id);
      held_.insert(request_id);
    }
    scheduler_.FinishRequest(&e.request, /*keep_blocks=*/hold);
    out.finished = true;
    out.finish_reason = reason;
    if (e.text && reason != FinishReason::kError) out.new_text = e.text->Finish();
    requests_.erase(it);
    return out;
  }

  RequestOutput SampleAndProcess(Entry& e, std::span<float> logits) {
    Request& r = e.request;
    const SamplingParams& p = r.params;
    const bool penalties = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
                           p.presence_penalty != 0.0f;
    std::vector<float> raw;  // logprobs come from the model's own distribution
    if (p.logprobs >= 0 && (penalties || e.grammar)) raw.assign(logits.begin(), logits.end());
    if (penalties) ApplyPenalties(logits, r.prompt_token_ids(), r.output_token_ids(), p);
    if (e.grammar) e.grammar->ApplyMask(logits);
    const int32_t token = SampleToken(logits, p, r.generator);
    std::optional<TokenLogprob> logprob;
    if (p.logprobs >= 0) {
      const std::span<const float> model_logits =
          raw.empty() ? std::span<const float>(logits) : std::span<const float>(raw);
      logprob = ComputeLogprobs(model_logits, token, p.logprobs);
    }
    return ProcessToken(e, token, std::move(logprob));
  }

  // Appends a sampled token and runs the stop checks; finishes the request when one holds.
  RequestOutput ProcessToken(Entry& e, int32_t token, std::optional<TokenLogprob> logprob) {
    Request& r = e.request;
    const SamplingParams& p = r.params;
    r.token_ids.push_back(token);
    RequestOutput out = BaseOutput(e);
    out.new_token_ids.push_back(token);
    if (logprob && p.logprobs >= 0) out.new_logprobs.push_back(std::move(*logprob));

    FinishReason reason = FinishReason::kNone;
    const bool is_eos =
        !p.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), token) != eos_ids_.end();
    const bool is_stop_token =
        std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end();
    bool grammar_done = false;
    if (e.grammar && !is_eos && !is_stop_token) {
      if (Status st = e.grammar->Accept(token); !st.ok()) {  // a remote prefill's token, say
        log::warn("request {}: {}", r.request_id, st.message());
        return Finish(r.request_id, FinishReason::kError);  // the token is not emitted
      }
      grammar_done = e.grammar->IsComplete();
    }
    if (is_eos || is_stop_token) {
      reason = FinishReason::kStop;  // the stop token's text is not part of the output text
    } else if (e.text) {
      StopStringMatcher::Result t = e.text->Push(token);
      out.new_text = std::move(t.text);
      if (t.stopped) reason = FinishReason::kStop;
    }
    if (reason == FinishReason::kNone && grammar_done) reason = FinishReason::kStop;
    if (reason == FinishReason::kNone &&
        (r.num_output_tokens() >= p.max_tokens || r.num_tokens() >= config_.max_model_len)) {
      reason = FinishReason::kLength;
    }
    if (reason == FinishReason::kNone) return out;

    const bool stopped_by_string =
        reason == FinishReason::kStop && !is_eos && !is_stop_token && !grammar_done;
    RequestOutput last = Finish(r.request_id, reason);  // e is gone from here on
    if (!stopped_by_string) out.new_text += last.new_text;
    out.held_block_ids = std::move(last.held_block_ids);
    out.finished = true;
    out.finish_reason = reason;
    return out;
  }

  Entry* AwaitingRemote(const std::string& request_id) {
    auto it = requests_.find(request_id);
    if (it == requests_.end() || it->second->request.status != RequestStatus::kRemotePrefill) {
      return nullptr;
    }
    return it->second.get();
  }

  std::unique_ptr<ModelRunner> runner_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  EngineConfig config_;
  KVCacheManager kv_;
  Scheduler scheduler_;
  std::mt19937_64 global_generator_;
  std::vector<int32_t> eos_ids_;
  std::unique_ptr<GrammarRuntime> grammar_;  // structured outputs: compiled grammars, token masks
  std::vector<RemotePrefillTask> remote_tasks_;  // admitted, not yet taken
  std::unordered_set<std::string> held_;         // finished hold_blocks requests' ids
  std::unordered_map<std::string, std::unique_ptr<Entry>> requests_;
  std::vector<RequestOutput> pending_;  // outputs of aborted requests, returned by the next Step
  ForwardOutput forward_;               // the last step's logits rows and greedy picks
  std::shared_ptr<KvEventSink> kv_event_sink_;  // SetKvEventSink
  StepTimeline* timeline_ = nullptr;             // SetStepTimeline
  std::unique_ptr<kvtier::KvOffloader> offloader_;  // EngineConfig::kv_offload_host_bytes
};


}  // namespace tandem::engine_detail
