// Token masks: which tokens of the whole vocabulary may come next under a grammar, as a bitmask
// (bit i of word i / 32 set: token i allowed), the way the sampler applies it.
//
// TokenVocab holds every token's bytes sorted, with the common-prefix length of neighbours, so
// one pass over the sorted list walks the vocabulary as a byte trie: a prefix that the grammar
// rejects rejects every token after it that shares it (xgrammar, arXiv:2411.15100 section 3.1).
//
// TokenMasker speeds that up with a cache per automaton node (xgrammar's adaptive token mask
// cache): from a node, with the stack below it unknown, a token is
//   accepted   when some path takes all of its bytes inside the node's rule (or ends the rule
//              exactly at its last byte): allowed whatever the stack;
//   rejected   when every path fails before its rule ends: never allowed;
//   uncertain  when a path ends the rule with bytes left: decided per request against the real
//              stack.
// A mask is then the OR of the cached accepted sets of the state's stack tops plus the uncertain
// tokens that the real stacks take. Rules compiled in place (automaton.h) keep uncertain sets
// small. Stop tokens (EOS, <|im_end|>) are allowed exactly where the grammar may end; other
// special tokens never.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace tandem {
class Tokenizer;
}

namespace tandem::grammar {

class TokenVocab {
 public:
  // tokens[i]: the bytes of token i; `special`: control tokens (never allowed by a grammar unless
  // also in `stop_ids`); `stop_ids`: allowed where the grammar may end. Empty tokens never allowed.
  TokenVocab(std::vector<std::string> tokens, const std::vector<int32_t>& special,
             std::vector<int32_t> stop_ids);
  // Every id below tokenizer.vocab_size(): TokenBytes, IsSpecial.
  static std::shared_ptr<const TokenVocab> FromTokenizer(const Tokenizer& tokenizer,
                                                         std::vector<int32_t> stop_ids);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  size_t mask_words() const { return (tokens_.size() + 31) / 32; }
  const std::string& bytes(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  // The ordinary (grammar-checked) tokens in byte order, and lcp()[k]: the common-prefix length
  // of sorted()[k] and sorted()[k - 1] (0 for k = 0).
  const std::vector<int32_t>& sorted() const { return sorted_; }
  const std::vector<uint32_t>& lcp() const { return lcp_; }
  // sorted()[k]'s bytes, from one buffer in sorted order (a walk reads memory in order).
  std::string_view sorted_bytes(size_t k) const {
    return std::string_view(sorted_bytes_).substr(sorted_offset_[k], sorted_offset_[k + 1] - sorted_offset_[k]);
  }
  // The first k' > k with lcp()[k'] < lcp()[k] (size() of sorted() when none): the tokens between
  // share lcp()[k] bytes with sorted()[k - 1], so a walk that rejected that prefix skips them.
  // Jumping from k + 1 along it while lcp >= d finds the next token that does not share d bytes
  // in at most lcp()[k + 1] - d + 1 jumps (each lands on a smaller lcp).
  const std::vector<uint32_t>& skip() const { return skip_; }
  size_t longest() const { return longest_; }  // the longest ordinary token's bytes
  // The byte trie's nodes (the sum over sorted tokens of length - lcp): a walk's most steps.
  size_t trie_nodes() const { return trie_nodes_; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

 private:
  std::vector<std::string> tokens_;
  std::vector<int32_t> sorted_;
  std::vector<uint32_t> lcp_;
  std::string sorted_bytes_;
  std::vector<uint32_t> sorted_offset_;  // [sorted.size() + 1]
  std::vector<uint32_t> skip_;
  size_t longest_ = 0;
  size_t trie_nodes_ = 0;
  std::vector<int32_t> stop_ids_;
};

class TokenMasker {
 public:
  // One masker per compiled grammar (its cache is by node of `automaton`); matchers passed to
  // Fill must run that automaton.
  TokenMasker(std::shared_ptr<const TokenVocab> vocab, std::shared_ptr<const Automaton> automaton);
  ~TokenMasker();
  TokenMasker(const TokenMasker&) = delete;
  TokenMasker& operator=(const TokenMasker&) = delete;

  // The mask for what may follow `matcher`'s state: vocab.mask_words() words. One thread at a
  // time (the engine's); Precompute may run on another meanwhile.
  void Fill(Matcher& matcher, uint32_t* mask);
  // The same without the cache: one walk of the vocabulary from the whole state (the reference
  // that Fill is tested against, and the cost Fill saves).
  void FillUncached(Matcher& matcher, uint32_t* mask);

  // Fills the cache for every node not in it yet (what Fill would compute on first visits), in
  // node order, on the calling thread with a matcher of its own: safe beside Fill on one other
  // thread (a node both compute is kept once). Stops when *stop becomes true or the cache holds
  // `budget_bytes`.
  void Precompute(const std::atomic<bool>* stop = nullptr, size_t budget_bytes = kPrecomputeBudget);
  static constexpr size_t kPrecomputeBudget = size_t{64} << 20;

  size_t cached_nodes() const { return cached_.load(std::memory_order_relaxed); }
  size_t cached_bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  enum class Verdict : uint8_t { kAccepted, kRejected, kUncertain };
  // A node's cache. The accepted set is a bitmask, or its ids when fewer than the bitmask's
  // words (most nodes outside strings accept few tokens).
  struct NodeMasks {
    std::vector<uint32_t> accepted_bits;  // mask_words() words, or empty
    std::vector<int32_t> accepted_ids;    // when accepted_bits is empty
    std::vector<int32_t> uncertain;       // token ids, in sorted order
    size_t bytes() const {
      return 4 * (accepted_bits.size() + accepted_ids.size() + uncertain.size()) + sizeof(NodeMasks);
    }
  };
  struct Scratch {  // per depth of a walk: Matcher state numbers; a rule end with bytes left seen
    std::vector<int32_t> states;
    std::vector<char> context;
  };
  // Walks the sorted vocabulary from `start`; calls on(id, verdict) for every ordinary token that
  // is not rejected (accepted or uncertain).
  template <typename OnToken>
  void Walk(Matcher& m, const Matcher::State& start, Scratch& scratch, OnToken&& on);
  std::unique_ptr<NodeMasks> Compute(Matcher& m, int32_t node, Scratch& scratch);
  // The node's cache entry, computed with `m` when missing.
  const NodeMasks& MasksOf(Matcher& m, int32_t node, Scratch& scratch);

  std::shared_ptr<const TokenVocab> vocab_;
  std::shared_ptr<const Automaton> automaton_;
  std::unique_ptr<std::atomic<NodeMasks*>[]> slots_;  // [num_nodes]; published once, owned here
  std::atomic<size_t> cached_{0};
  std::atomic<size_t> bytes_{0};
  Scratch scratch_;     // Fill's
};

}  // namespace tandem::grammar
