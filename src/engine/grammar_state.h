// Structured outputs in the engine: one GrammarRuntime per engine (the compiled-grammar cache, the
// tokenizer's vocabulary as a TokenVocab, one TokenMasker per grammar in use), and a GrammarState
// per request (its Matcher). The engine masks each structured request's logits before sampling
// and advances the state with the sampled token (sampling_params.h, `structured`).
// Not thread-safe except GrammarRuntime::Check; the engine thread owns the rest.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "grammar/mask_precompute.h"
#include "grammar/matcher.h"
#include "grammar/structured_output.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace tandem {

class GrammarState {
 public:
  GrammarState(std::shared_ptr<grammar::TokenMasker> masker,
               std::shared_ptr<const grammar::Automaton> automaton,
               std::shared_ptr<const grammar::TokenVocab> vocab, bool allow_stop);

  // Sets to -infinity the logits ([model vocab], possibly longer than the tokenizer's) of the
  // tokens that cannot come next; end-of-sequence ids only where the grammar may end (and never
  // when `allow_stop` is false: ignore_eos).
  void ApplyMask(std::span<float> logits);
  // The same mask as bits (bit t % 32 of word t / 32 set: token t may come next; ids past the
  // tokenizer's vocabulary clear), for a runner that masks on its device (PickSpec::allowed).
  // Valid until the next call or Accept.
  std::span<const uint32_t> Mask();
  // Advances over `token`'s bytes. InvalidArgument when the grammar does not allow it (a token
  // from elsewhere: a remote prefill's or a replayed prefix).
  Status Accept(int32_t token);
  // Nothing more can follow: the request is done.
  bool IsComplete() const { return matcher_.IsComplete(); }
  bool IsAccepting() const { return matcher_.IsAccepting(); }

 private:
  std::shared_ptr<grammar::TokenMasker> masker_;
  std::shared_ptr<const grammar::TokenVocab> vocab_;
  grammar::Matcher matcher_;
  bool allow_stop_;
  std::vector<uint32_t> mask_;
};

class GrammarRuntime {
 public:
  // `stop_ids`: the engine's end-of-sequence ids (allowed where a grammar may end).
  GrammarRuntime(std::shared_ptr<const Tokenizer> tokenizer, std::vector<int32_t> stop_ids);

  // Whether `spec` compiles (InvalidArgument saying why, naming the parameter kind). Thread-safe.
  Status Check(const grammar::StructuredOutputSpec& spec);
  // A state at the grammar's start, advanced over `prefix` (tokens generated under it before).
  Result<std::unique_ptr<GrammarState>> Start(const grammar::StructuredOutputSpec& spec,
                                              std::span<const int32_t> prefix, bool allow_stop);

 private:
  // The spec's automaton from the cache (compiled on a miss); Check's errors.
  Result<std::shared_ptr<const grammar::Automaton>> Compiled(const grammar::StructuredOutputSpec& spec);

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<int32_t> stop_ids_;
  grammar::StructuredOutputCache cache_;
  std::shared_ptr<const grammar::TokenVocab> vocab_;  // made at the first Start (~150 ms for Qwen3)
  // One masker per automaton (it holds the automaton); beyond kMaxIdleMaskers, those no request
  // uses are dropped (their node caches with them).
  static constexpr size_t kMaxIdleMaskers = 64;
  std::map<const grammar::Automaton*, std::shared_ptr<grammar::TokenMasker>> maskers_;
  // A new masker's node caches are filled on a background thread (grammar/mask_precompute.h).
  // Last: destroyed first, its thread joined before the maskers go.
  grammar::MaskPrecomputer precompute_;
};

}  // namespace tandem
