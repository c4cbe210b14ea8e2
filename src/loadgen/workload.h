// Workloads: what `tandem bench` sends. A workload yields WorkItems, each a conversation of one or
// more turns (a turn is one request; later turns resend the history with the server's replies).
//
//   synthetic  prompts of --input-len tokens and max_tokens --output-len, lengths fixed or drawn
//              from a distribution; optional shared prefixes (num_prefixes system prompts of
//              prefix_len tokens, item i uses prefix i % num_prefixes) and multi-turn sessions.
//   sharegpt   ShareGPT JSON: [{"conversations": [{"from": "human"|"gpt", "value": ...}]}];
//              each human turn (up to num_turns) is a request whose max_tokens is the token count
//              of the gpt reply after it (as vLLM's benchmark does), or --output-len when given.
//   mooncake   Mooncake trace JSONL: {"timestamp": ms, "input_length", "output_length",
//              "hash_ids": [...]}; hash id h is a deterministic block of block_size tokens (512 in
//              Mooncake's traces), so equal hash id prefixes give equal prompt prefixes; the
//              timestamps are kept for replay.
//
// Prompt text is built from the tokenizer's vocabulary: words that are one token each, start with a
// space and are letters only, so a text of n such words encodes to exactly n tokens (the
// pre-tokenizer splits before each space) and any prefix of whole words is a token prefix.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace tandem::bench {

// "N" (fixed), "uniform:A:B" (integers A..B inclusive), "normal:MU:SIGMA" (rounded, at least 1).
struct LengthDist {
  enum class Kind { kFixed, kUniform, kNormal };
  Kind kind = Kind::kFixed;
  double a = 128, b = 0;
  int Sample(std::mt19937_64& rng) const;
  double Mean() const;
  std::string ToString() const;
};
Result<LengthDist> ParseLengthDist(const std::string& text);

class PromptVocab {
 public:
  // InvalidArgument when the vocabulary has fewer than 64 suitable words.
  static Result<std::shared_ptr<const PromptVocab>> FromTokenizer(const Tokenizer& tokenizer);
  // `n` words drawn with `rng` (n >= 0).
  std::string Words(int n, std::mt19937_64& rng) const;
  // `n` words from a generator seeded with `seed`: Words(k, s) is a prefix of Words(n, s), k < n.
  std::string Words(int n, uint64_t seed) const;
  size_t size() const { return words_.size(); }

 private:
  std::vector<std::string> words_;
};

struct Turn {
  std::string text;       // the user message of this turn
  int input_tokens = 0;   // its tokens (built or counted)
  int output_tokens = 1;  // max_tokens
};

struct WorkItem {
  uint64_t id = 0;
  std::string system;     // shared prefix / system prompt ("" when none)
  int system_tokens = 0;
  std::vector<Turn> turns;
  double timestamp_s = -1;  // trace arrival time (mooncake, phases), else -1
  int phase = -1;           // index of its phase (--phases, loadgen/phases.h), else -1
};

class Workload {
 public:
  virtual ~Workload() = default;
  // The next item; nullopt when a finite workload is used up.
  virtual std::optional<WorkItem> Next() = 0;
  virtual bool has_timestamps() const { return false; }
  // Timestamps are seconds from the run's start (true) or from the first item's (false: a trace).
  virtual bool timestamps_from_zero() const { return false; }
};

struct WorkloadOptions {
  std::string kind = "synthetic";  // synthetic | sharegpt | mooncake
  std::string path;                // dataset file (sharegpt, mooncake)
  LengthDist input_len;            // synthetic: the tokens of each turn after the shared prefix
  LengthDist output_len;
  bool output_len_given = false;   // sharegpt: override the replies' lengths
  int num_prefixes = 0;            // synthetic: distinct shared prefixes (0: none)
  int prefix_len = 0;
  int num_turns = 1;               // synthetic, sharegpt: turns per conversation
  int block_size = 512;            // mooncake: tokens per hash id
  int max_model_len = 0;           // sharegpt: skip conversations longer than this (0: no limit)
  uint64_t seed = 0;
};

// NotFound / InvalidArgument for a missing or malformed dataset (naming file and line).
Result<std::unique_ptr<Workload>> MakeWorkload(const WorkloadOptions& options,
                                               std::shared_ptr<const Tokenizer> tokenizer,
                                               std::shared_ptr<const PromptVocab> vocab);

// Parsers, exposed for tests.
Result<std::vector<WorkItem>> LoadShareGpt(const std::string& json_text, const Tokenizer& tokenizer,
                                           const WorkloadOptions& options);
struct MooncakeEntry {
  double timestamp_ms = 0;
  int input_length = 0;
  int output_length = 0;
  std::vector<uint64_t> hash_ids;
};
Result<std::vector<MooncakeEntry>> ParseMooncake(const std::string& jsonl_text);
// The prompt of one trace entry: hash id blocks (the last cut to input_length), then filler words.
std::string MooncakePrompt(const MooncakeEntry& entry, int block_size, const PromptVocab& vocab,
                           uint64_t seed, uint64_t item_id);

}  // namespace tandem::bench
