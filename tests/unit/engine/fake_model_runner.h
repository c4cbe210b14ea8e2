// FakeModelRunner: a deterministic stand-in for a model that makes paging bugs visible.
//
// Its "KV" for a token at position p is (p, token, chain_p) with chain_p = Mix(chain_{p-1}, token),
// written into block_table[p / B] slot p % B. Before computing a token it reads every earlier
// position's slot through the block table and checks that it holds that position and a chain
// consistent with its predecessor: a wrong block table, a block reused while still needed or a
// prefix-cache hit on the wrong block shows up as an error (recorded and returned as Internal).
// Logits are a pseudo-random function of the chain of the whole history, so any wrong KV also
// changes the tokens. ReferenceLogits(tokens) computes the same from a plain token list.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/model_runner.h"

namespace tandem::testing {

inline uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class FakeModelRunner : public ModelRunner {
 public:
  explicit FakeModelRunner(int vocab_size = 512, int max_positions = 4096,
                           std::vector<int> eos = {}) {
    config_.architecture = "FakeForCausalLM";
    config_.vocab_size = vocab_size;
    config_.max_position_embeddings = max_positions;
    config_.eos_token_ids = std::move(eos);
  }

  static uint64_t ChainOf(const std::vector<int32_t>& tokens) {
    uint64_t c = 0;
    for (int32_t t : tokens) c = Mix(c, static_cast<uint64_t>(t));
    return c;
  }
  static void LogitsForChain(uint64_t chain, int vocab, float* out) {
    for (int i = 0; i < vocab; ++i) {
      out[i] = static_cast<float>(Mix(chain, 1000003ull + i) % 1048576) / 1048576.0f * 10.0f - 5.0f;
    }
  }
  std::vector<float> ReferenceLogits(const std::vector<int32_t>& tokens) const {
    std::vector<float> l(config_.vocab_size);
    LogitsForChain(ChainOf(tokens), config_.vocab_size, l.data());
    return l;
  }
  // Greedy continuation of `prompt` for n tokens, computed without any KV cache.
  std::vector<int32_t> GreedyReference(std::vector<int32_t> tokens, int n) const {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      auto l = ReferenceLogits(tokens);
      const int32_t t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      out.push_back(t);
      tokens.push_back(t);
    }
    return out;
  }

  const ModelConfig& config() const override { return config_; }
  size_t KVBlockBytes(int block_size) const override { return 1024u * block_size; }
  Status AllocateKVCache(int num_blocks, int block_size) override {
    num_blocks_ = num_blocks;
    block_size_ = block_size;
    slots_.assign(static_cast<size_t>(num_blocks) * block_size, Slot{});
    return Status::Ok();
  }

  // One "layer" of trivially copyable slots: copying a block's bytes between two fakes moves its
  // KV, as a transfer agent would.
  KVCacheLayout kv_cache_layout() override {
    KVCacheLayout layout;
    if (slots_.empty()) return layout;
    layout.layer_base = {slots_.data()};
    layout.block_bytes = sizeof(Slot) * block_size_;
    layout.num_blocks = num_blocks_;
    return layout;
  }

  Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override {
    ++num_steps;
    int step_tokens = 0;
    std::vector<uint64_t> rows;
    for (const SequenceSlice& s : batch.seqs) {
      const int n = static_cast<int>(s.token_ids.size());
      step_tokens += n;
      num_tokens_computed += n;
      const int end = s.start_pos + n;
      if (static_cast<int>(s.block_table.size()) * block_size_ < end) {
        return Fail(fmt::format("block table of {} blocks too short for {} positions",
                                s.block_table.size(), end));
      }
      if (end > config_.max_position_embeddings) return Fail("beyond max positions");
      uint64_t chain = 0;
      for (int q = 0; q < s.start_pos; ++q) {
        const Slot& slot = At(s.block_table, q);
        if (!slot.written || slot.pos != q || slot.chain != Mix(chain, slot.token)) {
          return Fail(fmt::format("position {} (block {}) holds pos {} written {}: stale or wrong KV",
                                  q, s.block_table[q / block_size_], slot.pos, slot.written));
        }
        chain = slot.chain;
      }
      for (int i = 0; i < n; ++i) {
        const int32_t t = s.token_ids[i];
        if (t < 0 || t >= config_.vocab_size) return Fail("token id out of the vocab");
        chain = Mix(chain, static_cast<uint64_t>(t));
        Slot& slot = At(s.block_table, s.start_pos + i);
        slot = Slot{true, s.start_pos + i, t, chain};
        if (s.logits == SequenceSlice::Logits::kAll) rows.push_back(chain);
      }
      if (s.logits == SequenceSlice::Logits::kLast) rows.push_back(chain);
    }
    max_step_tokens = std::max(max_step_tokens, step_tokens);
    max_step_seqs = std::max(max_step_seqs, static_cast<int>(batch.seqs.size()));
    step_token_counts.push_back(step_tokens);
    logits->resize(rows.size() * config_.vocab_size);
    for (size_t r = 0; r < rows.size(); ++r) {
      LogitsForChain(rows[r], config_.vocab_size, logits->data() + r * config_.vocab_size);
    }
    if (fail_next_forward) {
      fail_next_forward = false;
      return Status(StatusCode::kInternal, "injected failure");
    }
    return Status::Ok();
  }

  // Observations for tests.
  std::vector<std::string> errors;
  int num_steps = 0;
  int64_t num_tokens_computed = 0;
  int max_step_tokens = 0;
  int max_step_seqs = 0;
  std::vector<int> step_token_counts;
  bool fail_next_forward = false;

 private:
  struct Slot {
    bool written = false;
    int pos = -1;
    int32_t token = 0;
    uint64_t chain = 0;
  };
  Slot& At(std::span<const int32_t> table, int pos) {
    return slots_[static_cast<size_t>(table[pos / block_size_]) * block_size_ + pos % block_size_];
  }
  Status Fail(std::string msg) {
    errors.push_back(msg);
    return Status(StatusCode::kInternal, std::move(msg));
  }

  ModelConfig config_;
  int num_blocks_ = 0;
  int block_size_ = 16;
  std::vector<Slot> slots_;
};

}  // namespace tandem::testing
