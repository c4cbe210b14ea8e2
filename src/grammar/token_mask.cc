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
  sorted_offset_.reserve(sorted_.size() + 1);
  for (size_t k = 0; k < sorted_.size(); ++k) {
    const std::string& t = tokens_[sorted_[k]];
    sorted_offset_.push_back(static_cast<uint32_t>(sorted_bytes_.size()));
    sorted_bytes_ += t;
    longest_ = std::max(longest_, t.size());
    trie_nodes_ += t.size() - lcp_[k];
  }
  sorted_offset_.push_back(static_cast<uint32_t>(sorted_bytes_.size()));
  // skip_: the next smaller lcp, by a stack of the indexes still waiting for one.
  skip_.assign(sorted_.size(), static_cast<uint32_t>(sorted_.size()));
  std::vector<uint32_t> waiting;
  for (size_t k = 0; k < sorted_.size(); ++k) {
    while (!waiting.empty() && lcp_[waiting.back()] > lcp_[k]) {
      skip_[waiting.back()] = static_cast<uint32_t>(k);
      waiting.pop_back();
    }
    waiting.push_back(static_cast<uint32_t>(k));
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
  slots_ = std::make_unique<std::atomic<NodeMasks*>[]>(automaton_->num_nodes());
  for (size_t n = 0; n < automaton_->num_nodes(); ++n) slots_[n].store(nullptr, std::memory_order_relaxed);
}

TokenMasker::~TokenMasker() {
  for (size_t n = 0; n < automaton_->num_nodes(); ++n) delete slots_[n].load(std::memory_order_relaxed);
}

template <typename OnToken>
void TokenMasker::Walk(Matcher& m, const Matcher::State& start, Scratch& scratch, OnToken&& on) {
  const std::vector<int32_t>& sorted = vocab_->sorted();
  const std::vector<uint32_t>& lcp = vocab_->lcp();
  const std::vector<uint32_t>& skip = vocab_->skip();
  const size_t n = sorted.size();
  // States by number (Matcher::StepId memoizes transitions), one per depth of the current prefix.
  if (m.num_states() > kMaxMatcherStates) m.ClearStateTable();  // about 1 KiB each
  scratch.states.resize(vocab_->longest() + 1);
  scratch.context.resize(vocab_->longest() + 1);
  int32_t* states = scratch.states.data();  // [depth]
  char* context = scratch.context.data();
  states[0] = m.StateId(start);
  context[0] = start.context_end;
  size_t depth = 0;  // states[0..depth] hold the previous token's prefix
  size_t k = 0;
  while (k < n) {
    const int32_t id = sorted[k];
    const std::string_view t = vocab_->sorted_bytes(k);
    size_t j = std::min<size_t>(lcp[k], depth);
    for (; j < t.size(); ++j) {
      if (m.StateFlags(states[j]) & Matcher::kNoTops) break;  // nothing can take byte j
      states[j + 1] = m.StepId(states[j], static_cast<uint8_t>(t[j]));
      context[j + 1] = context[j] || (m.StateFlags(states[j + 1]) & Matcher::kContextEnd);
    }
    depth = j;
    ++k;
    if (j == t.size() && states[j] != Matcher::kDeadState) {
      on(id, Verdict::kAccepted);
      continue;
    }
    // Byte j (or the last) cannot be taken here. Before it, did a rule end with bytes left?
    const size_t before = j == t.size() ? j - 1 : j;
    if (context[before]) on(id, Verdict::kUncertain);
    // The tokens after it that share its first j bytes fail the same way.
    if (context[j]) {
      for (; k < n && lcp[k] >= j; ++k) on(sorted[k], Verdict::kUncertain);
    } else {
      while (k < n && lcp[k] >= j) k = skip[k];
    }
  }
}

std::unique_ptr<TokenMasker::NodeMasks> TokenMasker::Compute(Matcher& m, int32_t node, Scratch& scratch) {
  auto masks = std::make_unique<NodeMasks>();
  std::vector<int32_t> accepted;
  Matcher::State start;
  start.tops = {m.FrameOf(node, Matcher::kUnknownParent)};
  Walk(m, start, scratch, [&](int32_t id, Verdict v) {
    (v == Verdict::kAccepted ? accepted : masks->uncertain).push_back(id);
  });
  if (accepted.size() < vocab_->mask_words()) {
    masks->accepted_ids = std::move(accepted);
  } else {
    masks->accepted_bits.assign(vocab_->mask_words(), 0);
    for (int32_t id : accepted) masks->accepted_bits[static_cast<size_t>(id) / 32] |= 1u << (id % 32);
  }
  masks->accepted_ids.shrink_to_fit();
  masks->uncertain.shrink_to_fit();
  return masks;
}

const TokenMasker::NodeMasks& TokenMasker::MasksOf(Matcher& m, int32_t node, Scratch& scratch) {
  std::atomic<NodeMasks*>& slot = slots_[static_cast<size_t>(node)];
  if (NodeMasks* cached = slot.load(std::memory_order_acquire)) return *cached;
  std::unique_ptr<NodeMasks> masks = Compute(m, node, scratch);
  NodeMasks* expected = nullptr;
  if (!slot.compare_exchange_strong(expected, masks.get(), std::memory_order_acq_rel)) {
    return *expected;  // the other thread was first: keep its copy
  }
  cached_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(masks->bytes(), std::memory_order_relaxed);
  return *masks.release();
}

void TokenMasker::Precompute(const std::atomic<bool>* stop, size_t budget_bytes) {
  Matcher m(automaton_);
  Scratch scratch;
  for (size_t n = 0; n < automaton_->num_nodes(); ++n) {
    if ((stop != nullptr && stop->load(std::memory_order_relaxed)) || cached_bytes() >= budget_bytes) break;
    // A node no stack can have on top (no byte edges) is never asked for; MasksOf skips cached ones.
    if (!automaton_->node(static_cast<int>(n)).bytes.empty()) MasksOf(m, static_cast<int32_t>(n), scratch);
  }
}

void TokenMasker::Fill(Matcher& m, uint32_t* mask) {
  assert(&m.automaton() == automaton_.get() && "a matcher of another grammar");
  const size_t words = vocab_->mask_words();
  std::fill(mask, mask + words, 0u);
  const Matcher::State& state = m.state();
  for (int32_t top : state.tops) {
    const NodeMasks& masks = MasksOf(m, m.NodeOf(top), scratch_);
    if (!masks.accepted_bits.empty()) {
      for (size_t w = 0; w < words; ++w) mask[w] |= masks.accepted_bits[w];
    } else {
      for (int32_t id : masks.accepted_ids) mask[id / 32] |= 1u << (id % 32);
    }
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
  Walk(m, m.state(), scratch_, [&](int32_t id, Verdict v) {
    if (v == Verdict::kAccepted) mask[id / 32] |= 1u << (id % 32);
  });
  if (m.state().accepting) {
    for (int32_t id : vocab_->stop_ids()) mask[id / 32] |= 1u << (id % 32);
  }
}

}  // namespace tandem::grammar
