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
#include "engine/forward_worker.h"
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
    // A device runner (it samples on its device): the overlapped loop's hand-offs poll for up to
    // 20 ms, longer than a decode step, instead of sleeping (forward_worker.h).
    if (config_.async_scheduling && runner_->SamplesOnDevice()) worker_.set_spin(std::chrono::milliseconds(20));
  }

  // Finishes every request the step scheduled with `st` as its error.
  void FailScheduled(const SchedulerOutput& sched, const Status& st, std::vector<RequestOutput>* outputs) {
    for (const ScheduledRequest& s : sched.scheduled) FailRequest(s.request->request_id, st, outputs);
  }
  void FailRequest(const std::string& request_id, const Status& st, std::vector<RequestOutput>* outputs) {
    RequestOutput out = Finish(request_id, FinishReason::kError);
    out.error = st.ToString();
    outputs->push_back(std::move(out));
  }
  // The KV tier's onboard copies that landed go to the KV cache manager (their requests run from
  // the next Schedule); wait: for the oldest in flight. A failed copy fails every request waiting
  // for one and drops the prefix cache's free blocks (what landed may be stale).
  void CollectLanded(bool wait, std::vector<RequestOutput>* outputs) {
    std::vector<int> landed;
    const Status st = offloader_->TakeLanded(wait, &landed);
    if (!st.ok()) {
      log::error("kv onboard failed: {}", st.ToString());
      FailLandingHolders(st, outputs);
    }
    kv_.MarkLanded(landed);
    if (!st.ok()) kv_.ResetPrefixCache();
  }
  // Fails every request holding a landing block (waiting for it, or for remote KV beside it):
  // the copies into those blocks failed or never started.
  void FailLandingHolders(const Status& st, std::vector<RequestOutput>* outputs) {
    std::vector<std::string> ids;
    for (const auto& [id, e] : requests_) {
      if (kv_.Landing(id)) ids.push_back(id);
    }
    for (const std::string& id : ids) FailRequest(id, st, outputs);
  }

  void SetUpOffload() {
    offloader_ = MakeKvOffloader(config_, *runner_);
    if (offloader_) kv_.SetTier(offloader_->index());
    if (offloader_) kv_.set_async_onboard(offloader_->async_onboard());
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
    entry->serial = ++next_serial_;
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
    DropPendingToken(e.request);
    scheduler_.FinishRequest(&e.request);
    RequestOutput out = BaseOutput(e);
    out.finished = true;
    out.finish_reason = FinishReason::kAbort;
    pending_.push_back(std::move(out));
    requests_.erase(it);
  }

  ~EngineImpl() override {
    if (inflight_) worker_.Wait();  // the forward pass reads what inflight_ owns
  }

  std::vector<RequestOutput> Step() override {
    return config_.async_scheduling ? StepOverlapped() : StepSync();
  }

  // The synchronous step: schedule -> run the model -> sample -> post-process.
  std::vector<RequestOutput> StepSync();

  // Both loops' Step: publishes the KV events of the step whichever way it returns.
  struct PublishKvEventsOnReturn {
    EngineImpl* self;
    ~PublishKvEventsOnReturn() { self->PublishKvEvents(); }
  };

  // What a scheduling admitted besides the batch: remote prefills become tasks, requests the pool
  // cannot hold end with "length".
  void TakeAdmitted(const SchedulerOutput& sched, std::vector<RequestOutput>* outputs);
  // A step that failed before its batch ran: what it scheduled and what it admitted for a remote
  // prefill fail with `st` (their cached prefix may be in stale blocks); the unfittable ones still end.
  void FailAdmitted(const SchedulerOutput& sched, const Status& st, std::vector<RequestOutput>* outputs);
  void FinishUnfittable(const SchedulerOutput& sched, std::vector<RequestOutput>* outputs);
  // Whether a remote prefill this scheduling admitted holds one of the blocks it evicted.
  bool RemotePrefillTakesEvicted(const SchedulerOutput& sched, std::span<const kvtier::EvictedBlock> evicted);

  // One step's forward batch and what its slices point into.
  struct StepBatch {
    ForwardBatch batch;
    std::vector<PickSpec> picks;  // [scheduled]
    std::vector<std::vector<cpu::PenaltyEntry>> penalties;  // [scheduled]
    std::vector<size_t> masked;  // the structured rows picked by the runner (PickSpec::allowed)
    std::vector<std::vector<int32_t>> tokens, tables;  // own copies (BuildBatch's `own`)
    std::vector<std::vector<uint32_t>> masks;          // own copies of the masked rows' bitmasks
    size_t num_rows = 0, num_samples = 0;              // kLast rows, kPick rows
  };

  // The forward batch of `sched`. Greedy rows without penalties are picked by the runner (kPick:
  // on a GPU the logits stay there). On a runner that samples on its device every other row is a
  // kPick too, with a PickSpec: the engine keeps the randomness (the row's one uniform u drawn
  // here, as SampleToken would) and sends penalized rows' prompt + output ids as unique ids with
  // output counts (O(prompt + output) per row and step). On a host runner they come back as
  // logits for the host sampler (the same tokens: both follow SampleTokenWithUniform). `own`: the
  // slices' token ids and block tables are copies held in *b (the overlapped loop changes both
  // while the forward pass runs); else they point into the requests and the KV cache manager.
  // Masked rows' PickSpec::allowed is left to the caller.
  void BuildBatch(const SchedulerOutput& sched, bool own, StepBatch* b);

  void SetStepTimeline(StepTimeline* timeline) override {
    timeline_ = timeline;
    runner_->SetStepTimeline(timeline);
  }

  bool HasUnfinishedRequests() const override {
    // Onboard copies in flight are waited for even when their requests are gone (aborted), so
    // that their blocks' landing references come back.
    return scheduler_.has_schedulable() || !pending_.empty() || inflight_ != nullptr ||
           (offloader_ && offloader_->onboarding());
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
    s.num_running = scheduler_.num_running() + scheduler_.num_remote_prefill() + scheduler_.num_onboarding();
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
    uint64_t serial = 0;  // unique per engine: tells a reused request id apart
  };

  RequestOutput BaseOutput(const Entry& e) const {
    RequestOutput out;
    out.request_id = e.request.request_id;
    out.num_prompt_tokens = e.request.num_prompt_tokens;
    out.num_cached_tokens = std::max(0, e.request.num_cached_tokens);
    out.num_output_tokens = e.request.num_output_tokens();
    return out;
  }

  // The overlapped loop's pending token (kPendingTokenId) of a request that ends while the step
  // that samples it runs: not an output.
  static void DropPendingToken(Request& r) { r.token_ids.resize(r.known_token_ids().size()); }

  // Ends a request: frees its blocks, flushes its text, forgets it.
  RequestOutput Finish(const std::string& request_id, FinishReason reason) {
    auto it = requests_.find(request_id);
    Entry& e = *it->second;
    DropPendingToken(e.request);
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
    auto [token, logprob] = SampleHostRow(e, logits, e.request.output_token_ids());
    return ProcessToken(e, token, std::move(logprob));
  }

  // A row sampled on the host: penalties over the request's prompt and `output_ids` (its output
  // before this token), the grammar's mask, the token, and its log-probabilities (the model's own).
  std::pair<int32_t, std::optional<TokenLogprob>> SampleHostRow(Entry& e, std::span<float> logits,
                                                                std::span<const int32_t> output_ids) {
    Request& r = e.request;
    const SamplingParams& p = r.params;
    const bool penalties = p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
                           p.presence_penalty != 0.0f;
    std::vector<float> raw;  // logprobs come from the model's own distribution
    if (p.logprobs >= 0 && (penalties || e.grammar)) raw.assign(logits.begin(), logits.end());
    if (penalties) ApplyPenalties(logits, r.prompt_token_ids(), output_ids, p);
    if (e.grammar) e.grammar->ApplyMask(logits);
    const int32_t token = SampleToken(logits, p, r.generator);
    std::optional<TokenLogprob> logprob;
    if (p.logprobs >= 0) {
      const std::span<const float> model_logits =
          raw.empty() ? std::span<const float>(logits) : std::span<const float>(raw);
      logprob = ComputeLogprobs(model_logits, token, p.logprobs);
    }
    return {token, std::move(logprob)};
  }

  // Appends a sampled token and runs the stop checks; finishes the request when one holds.
  RequestOutput ProcessToken(Entry& e, int32_t token, std::optional<TokenLogprob> logprob) {
    e.request.token_ids.push_back(token);
    return *ProcessAppended(e, std::move(logprob), nullptr);
  }

  // What the overlapped loop finishes after it launched the next step: a token's text and stop
  // strings (FinishText).
  struct DeferredText {
    std::string request_id;
    uint64_t serial = 0;
    int32_t token = 0;
    RequestOutput out;
  };

  // The output of the request's newest token (token_ids.back()) and the stop checks; finishes the
  // request when one holds. `defer` (the overlapped loop): when neither EOS, a stop id, the
  // grammar nor the length ends the request, its detokenization and stop strings are left to
  // FinishText: nullopt, *defer filled.
  std::optional<RequestOutput> ProcessAppended(Entry& e, std::optional<TokenLogprob> logprob,
                                               DeferredText* defer) {
    Request& r = e.request;
    const SamplingParams& p = r.params;
    const int32_t token = r.token_ids.back();
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
    const bool length = r.num_output_tokens() >= p.max_tokens || r.num_tokens() >= config_.max_model_len;
    if (defer != nullptr && !is_eos && !is_stop_token && !grammar_done && !length) {
      defer->request_id = r.request_id;
      defer->serial = e.serial;
      defer->token = token;
      defer->out = std::move(out);
      return std::nullopt;
    }
    if (is_eos || is_stop_token) {
      reason = FinishReason::kStop;  // the stop token's text is not part of the output text
    } else if (e.text) {
      StopStringMatcher::Result t = e.text->Push(token);
      out.new_text = std::move(t.text);
      if (t.stopped) reason = FinishReason::kStop;
    }
    if (reason == FinishReason::kNone && grammar_done) reason = FinishReason::kStop;
    if (reason == FinishReason::kNone && length) reason = FinishReason::kLength;
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
  uint64_t next_serial_ = 0;                        // Entry::serial

  // ---- The overlapped loop (EngineConfig::async_scheduling; engine_overlap.cc) ----
  struct InFlightRow {
    std::string request_id;
    uint64_t serial = 0;
    SequenceSlice::Logits kind = SequenceSlice::Logits::kNone;
    int pending_index = -1;  // where its kPendingTokenId sits in token_ids, -1: none
  };
  struct InFlight {  // the step on the forward thread and everything its batch points into
    StepBatch sb;
    std::vector<InFlightRow> rows;  // [scheduled]
    ForwardOutput out;
    Status status;
  };
  std::vector<RequestOutput> StepOverlapped();
  bool OverlapPossible() const;
  Entry* FindEntry(const std::string& request_id, uint64_t serial);
  bool Collect(std::vector<RequestOutput>* outputs, std::vector<DeferredText>* deferred);
  void FinishTexts(std::vector<DeferredText>* deferred, std::vector<RequestOutput>* outputs);
  void Launch(SchedulerOutput sched, std::vector<RequestOutput>* outputs);
  RequestOutput FinishText(Entry& e, DeferredText d);
  ForwardWorker worker_;
  std::unique_ptr<InFlight> inflight_;
};


}  // namespace tandem::engine_detail
