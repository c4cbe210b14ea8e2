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

#include <cstdint>
#include <memory>
#include <string>
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
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

 private:
  std::vector<std::string> tokens_;
  std::vector<int32_t> sorted_;
  std::vector<uint32_t> lcp_;
  std::vector<int32_t> stop_ids_;
};

class TokenMasker {
 public:
  // One masker per compiled grammar (its cache is by node of `automaton`); matchers passed to
  // Fill must run that automaton.
  TokenMasker(std::shared_ptr<const TokenVocab> vocab, std::shared_ptr<const Automaton> automaton);

  // The mask for what may follow `matcher`'s state: vocab.mask_words() words.
  void Fill(Matcher& matcher, uint32_t* mask);
  // The same without the cache: one walk of the vocabulary from the whole state (the reference
  // that Fill is tested against, and the cost Fill saves).
  void FillUncached(Matcher& matcher, uint32_t* mask);

  size_t cached_nodes() const { return cache_.size(); }

 private:
  enum class Verdict : uint8_t { kAccepted, kRejected, kUncertain };
  struct NodeMasks {
    std::vector<uint32_t> accepted;   // a bitmask
    std::vector<int32_t> uncertain;   // token ids, in sorted order
  };
  // Walks the sorted vocabulary from `start`; calls on(id, verdict) for every ordinary token.
  template <typename OnToken>
  void Walk(Matcher& m, const Matcher::State& start, OnToken&& on);
  const NodeMasks& MasksOf(Matcher& m, int32_t node);

  std::shared_ptr<const TokenVocab> vocab_;
  std::shared_ptr<const Automaton> automaton_;
  std::unordered_map<int32_t, NodeMasks> cache_;  // by automaton node
  std::vector<int32_t> states_;  // per depth of the walk: Matcher state numbers
  std::vector<char> context_;    // per depth: a rule end with bytes left seen
};

}  // namespace tandem::grammar
