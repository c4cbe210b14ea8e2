#include "grammar/token_mask.h"

#include <algorithm>
#include <cassert>

#include "tokenizer/tokenizer.h"

namespace tandem::grammar {

namespace {
constexpr size_t kMaxMatcherStates = 1 << 16;
}  // namespace

TokenVocab::TokenVocab(std::vector<std::string> tokens, const std::vector<int32_t>& special,
                       std::vector<int32_t> stop_ids)
    : tokens_(std::move(tokens)), stop_ids_(std::move(stop_ids)) {
  std::vector<char> excluded(tokens_.size(), 0);
  for (int32_t id : special) {
    if (id >= 0 && static_cast<size_t>(id) < tokens_.size()) excluded[id] = 1;
  }
  for (int32_t id : stop_ids_) {
    if (id >= 0 && static_cast<size_t>(id) < tokens_.size()) excluded[id] = 1;
  }
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (!excluded[i] && !tokens_[i].empty()) sorted_.push_back(static_cast<int32_t>(i));
  }
  std::sort(sorted_.begin(), sorted_.end(),
            [&](int32_t a, int32_t b) { return tokens_[a] < tokens_[b]; });
  lcp_.assign(sorted_.size(), 0);
  for (size_t k = 1; k < sorted_.size(); ++k) {
    const std::string& a = tokens_[sorted_[k - 1]];
    const std::string& b = tokens_[sorted_[k]];
    uint32_t n = 0;
    while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
    lcp_[k] = n;
  }
}

std::shared_ptr<const TokenVocab> TokenVocab::FromTokenizer(const Tokenizer& tokenizer,
                                                             std::vector<int32_t> stop_ids) {
  std::vector<std::string> tokens(static_cast<size_t>(tokenizer.vocab_size()));
  std::vector<int32_t> special;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id)) {
      special.push_back(id);
    } else {
      tokens[static_cast<size_t>(id)] = tokenizer.TokenBytes(id);
    }
  }
  return std::make_shared<const TokenVocab>(std::move(tokens), special, std::move(stop_ids));
}

TokenMasker::TokenMasker(std::shared_ptr<const TokenVocab> vocab,
                         std::shared_ptr<const Automaton> automaton)
    : vocab_(std::move(vocab)), automaton_(std::move(automaton)) {
  size_t longest = 0;
  for (int32_t id : vocab_->sorted()) longest = std::max(longest, vocab_->bytes(id).size());
  states_.resize(longest + 1);
  context_.resize(longest + 1);
}

template <typename OnToken>
void TokenMasker::Walk(Matcher& m, const Matcher::State& start, OnToken&& on) {
  const std::vector<int32_t>& sorted = vocab_->sorted();
  const std::vector<uint32_t>& lcp = vocab_->lcp();
  // States by number (Matcher::StepId memoizes transitions), one per depth of the current prefix.
  if (m.num_states() > kMaxMatcherStates) m.ClearStateTable();  // about 1 KiB each
  states_[0] = m.StateId(start);
  context_[0] = start.context_end;
  size_t depth = 0;                   // states_[0..depth] hold the previous token's prefix
  size_t dead_len = SIZE_MAX;         // the previous tokens failed after this many shared bytes
  Verdict dead_verdict = Verdict::kRejected;
  for (size_t k = 0; k < sorted.size(); ++k) {
    const int32_t id = sorted[k];
    const size_t shared = lcp[k];
    if (shared >= dead_len) {  // it shares the failing prefix
      on(id, dead_verdict);
      continue;
    }
    dead_len = SIZE_MAX;
    const std::string& t = vocab_->bytes(id);
    size_t j = std::min(shared, depth);
    for (; j < t.size(); ++j) {
      if (m.StateById(states_[j]).tops.empty()) break;  // nothing can take byte j
      states_[j + 1] = m.StepId(states_[j], static_cast<uint8_t>(t[j]));
      context_[j + 1] = context_[j] || m.StateById(states_[j + 1]).context_end;
    }
    depth = j;
    if (j == t.size() && states_[j] != Matcher::kDeadState) {
      on(id, Verdict::kAccepted);
      continue;
    }
    // Byte j (or the last) cannot be taken here. Before it, did a rule end with bytes left?
    const size_t before = j == t.size() ? j - 1 : j;
    on(id, context_[before] ? Verdict::kUncertain : Verdict::kRejected);
    dead_len = j;
    dead_verdict = context_[j] ? Verdict::kUncertain : Verdict::kRejected;
  }
}

const TokenMasker::NodeMasks& TokenMasker::MasksOf(Matcher& m, int32_t node) {
  auto it = cache_.find(node);
  if (it != cache_.end()) return it->second;
  NodeMasks masks;
  masks.accepted.assign(vocab_->mask_words(), 0);
  Matcher::State start;
  start.tops = {m.FrameOf(node, Matcher::kUnknownParent)};
  Walk(m, start, [&](int32_t id, Verdict v) {
    if (v == Verdict::kAccepted) {
      masks.accepted[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
    } else if (v == Verdict::kUncertain) {
      masks.uncertain.push_back(id);
    }
  });
  return cache_.emplace(node, std::move(masks)).first->second;
}

void TokenMasker::Fill(Matcher& m, uint32_t* mask) {
  assert(&m.automaton() == automaton_.get() && "a matcher of another grammar");
  const size_t words = vocab_->mask_words();
  std::fill(mask, mask + words, 0u);
  const Matcher::State& state = m.state();
  for (int32_t top : state.tops) {
    const NodeMasks& masks = MasksOf(m, m.NodeOf(top));
    for (size_t w = 0; w < words; ++w) mask[w] |= masks.accepted[w];
    if (masks.uncertain.empty()) continue;
    Matcher::State single;
    single.tops = {top};
    if (m.num_states() > kMaxMatcherStates) m.ClearStateTable();
    const int32_t from = m.StateId(single);
    for (int32_t id : masks.uncertain) {
      if (mask[id / 32] & (1u << (id % 32))) continue;
      int32_t at = from;
      for (unsigned char c : vocab_->bytes(id)) {
        at = m.StepId(at, c);
        if (at == Matcher::kDeadState) break;
      }
      if (at != Matcher::kDeadState) mask[id / 32] |= 1u << (id % 32);
    }
  }
  if (state.accepting) {
    for (int32_t id : vocab_->stop_ids()) mask[id / 32] |= 1u << (id % 32);
  }
}

void TokenMasker::FillUncached(Matcher& m, uint32_t* mask) {
  std::fill(mask, mask + vocab_->mask_words(), 0u);
  Walk(m, m.state(), [&](int32_t id, Verdict v) {
    if (v == Verdict::kAccepted) mask[id / 32] |= 1u << (id % 32);
  });
  if (m.state().accepting) {
    for (int32_t id : vocab_->stop_ids()) mask[id / 32] |= 1u << (id % 32);
  }
}

}  // namespace tandem::grammar
