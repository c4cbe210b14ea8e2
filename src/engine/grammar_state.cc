#include "engine/grammar_state.h"

#include "kernels/cpu/sample.h"

namespace tandem {

GrammarState::GrammarState(std::shared_ptr<grammar::TokenMasker> masker,
                           std::shared_ptr<const grammar::Automaton> automaton,
                           std::shared_ptr<const grammar::TokenVocab> vocab, bool allow_stop)
    : masker_(std::move(masker)),
      vocab_(std::move(vocab)),
      matcher_(std::move(automaton)),
      allow_stop_(allow_stop),
      mask_(vocab_->mask_words()) {}

std::span<const uint32_t> GrammarState::Mask() {
  masker_->Fill(matcher_, mask_.data());
  if (!allow_stop_) {
    for (int32_t id : vocab_->stop_ids()) mask_[id / 32] &= ~(1u << (id % 32));
  }
  const int n = vocab_->size();
  if (n % 32 != 0 && static_cast<size_t>(n / 32) < mask_.size()) mask_[n / 32] &= (1u << (n % 32)) - 1;
  return mask_;
}

void GrammarState::ApplyMask(std::span<float> logits) { cpu::ApplyTokenBitmask(logits, Mask()); }

Status GrammarState::Accept(int32_t token) {
  if (token < 0 || token >= vocab_->size() || vocab_->bytes(token).empty() ||
      !matcher_.Accept(vocab_->bytes(token))) {
    return Err(StatusCode::kInvalidArgument, "token {} does not follow the structured output's grammar",
               token);
  }
  return Status::Ok();
}

GrammarRuntime::GrammarRuntime(std::shared_ptr<const Tokenizer> tokenizer,
                               std::vector<int32_t> stop_ids)
    : tokenizer_(std::move(tokenizer)), stop_ids_(std::move(stop_ids)) {}

Result<std::shared_ptr<const grammar::Automaton>> GrammarRuntime::Compiled(
    const grammar::StructuredOutputSpec& spec) {
  if (!tokenizer_) {
    return Status(StatusCode::kInvalidArgument, "structured outputs need an engine with a tokenizer");
  }
  auto a = cache_.Get(spec);
  if (!a.ok()) {
    return Err(StatusCode::kInvalidArgument, "structured output ({}): {}", grammar::KindName(spec.kind),
               a.status().message());
  }
  return a;
}

Status GrammarRuntime::Check(const grammar::StructuredOutputSpec& spec) { return Compiled(spec).status(); }

Result<std::unique_ptr<GrammarState>> GrammarRuntime::Start(const grammar::StructuredOutputSpec& spec,
                                                            std::span<const int32_t> prefix,
                                                            bool allow_stop) {
  auto automaton = Compiled(spec);
  if (!automaton.ok()) return automaton.status();
  if (!vocab_) vocab_ = grammar::TokenVocab::FromTokenizer(*tokenizer_, stop_ids_);
  if (maskers_.size() > kMaxIdleMaskers) {
    for (auto it = maskers_.begin(); it != maskers_.end();) {
      it = it->second.use_count() == 1 ? maskers_.erase(it) : std::next(it);
    }
  }
  std::shared_ptr<grammar::TokenMasker>& masker = maskers_[automaton->get()];
  if (!masker) {
    masker = std::make_shared<grammar::TokenMasker>(vocab_, *automaton);
    precompute_.Add(masker);
  }
  auto state = std::make_unique<GrammarState>(masker, *automaton, vocab_, allow_stop);
  for (int32_t token : prefix) {
    Status st = state->Accept(token);
    if (!st.ok()) return Err(StatusCode::kInvalidArgument, "the output so far: {}", st.message());
  }
  return state;
}

}  // namespace tandem
