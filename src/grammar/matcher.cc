#include "grammar/matcher.h"

#include <algorithm>

namespace tandem::grammar {

Matcher::Matcher(std::shared_ptr<const Automaton> automaton) : automaton_(std::move(automaton)) {
  Reset();
}

namespace {

uint64_t HashState(const Matcher::State& s) {
  uint64_t h = 1469598103934665603ull ^ (s.accepting ? 0x9e37u : 0u) ^ (s.context_end ? 0x7f4au : 0u);
  for (int32_t t : s.tops) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h;
}

}  // namespace

int32_t Matcher::StateId(const State& state) {
  if (states_.empty()) {  // kDeadState: every byte leads back to it
    states_.emplace_back();
    next_.assign(256, kDeadState);
    flags_.push_back(kNoTops);
  }
  if (state.tops.empty() && !state.accepting && !state.context_end) return kDeadState;
  std::vector<int32_t>& ids = table_index_[HashState(state)];
  for (int32_t id : ids) {
    if (states_[static_cast<size_t>(id)] == state) return id;
  }
  const auto id = static_cast<int32_t>(states_.size());
  states_.push_back(state);
  next_.resize(next_.size() + 256, -1);
  flags_.push_back(static_cast<uint8_t>((state.tops.empty() ? kNoTops : 0) |
                                        (state.context_end ? kContextEnd : 0)));
  ids.push_back(id);
  return id;
}

int32_t Matcher::StepSlow(int32_t id, uint8_t byte) {
  Step(states_[static_cast<size_t>(id)], byte, &step_scratch_);
  const int32_t to = StateId(step_scratch_);  // may grow the table
  next_[static_cast<size_t>(id) * 256 + byte] = to;
  return to;
}

void Matcher::ClearStateTable() {
  states_.clear();
  next_.clear();
  flags_.clear();
  table_index_.clear();
}

void Matcher::Reset() {
  state_ = State{};
  ++pass_;
  Close(Intern(automaton_->start(automaton_->root_rule()), kNoParent), &state_);
  std::sort(state_.tops.begin(), state_.tops.end());
}

int32_t Matcher::Intern(int32_t node, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) |
                       static_cast<uint32_t>(parent);
  auto [it, added] = index_.try_emplace(key, static_cast<int32_t>(frames_.size()));
  if (added) {
    frames_.push_back({node, parent});
    mark_.push_back(0);
  }
  return it->second;
}

void Matcher::Close(int32_t f0, State* out) {
  work_.push_back(f0);
  while (!work_.empty()) {
    const int32_t f = work_.back();
    work_.pop_back();
    if (mark_[f] == pass_) continue;
    mark_[f] = pass_;
    const Frame frame = frames_[f];
    const Node& n = automaton_->node(frame.node);
    if (!n.bytes.empty()) out->tops.push_back(f);
    if (n.final) {
      if (frame.parent == kNoParent) {
        out->accepting = true;
      } else if (frame.parent == kUnknownParent) {
        out->context_end = true;
      } else {
        work_.push_back(frame.parent);  // the caller goes on at its return node
      }
    }
    for (const CallEdge& c : n.calls) {
      const int32_t ret = Intern(c.ret, frame.parent);
      work_.push_back(Intern(automaton_->start(c.rule), ret));
    }
  }
}

void Matcher::Step(const State& from, uint8_t byte, State* to) {
  to->tops.clear();
  to->accepting = false;
  to->context_end = false;
  ++pass_;
  for (int32_t f : from.tops) {
    const std::vector<ByteEdge>& edges = automaton_->node(frames_[f].node).bytes;
    int32_t base = frames_[f].succ;
    if (base < 0) {
      base = static_cast<int32_t>(succ_.size());
      frames_[f].succ = base;
      succ_.resize(succ_.size() + edges.size(), -1);
    }
    for (size_t k = 0; k < edges.size(); ++k) {
      const ByteEdge& e = edges[k];
      if (e.lo > byte) break;  // sorted by lo
      if (byte > e.hi) continue;
      const size_t at = static_cast<size_t>(base) + k;
      if (succ_[at] < 0) succ_[at] = Intern(e.target, frames_[f].parent);
      Close(succ_[at], to);
    }
  }
  std::sort(to->tops.begin(), to->tops.end());
}

int64_t Matcher::MinBytesToComplete(const State& state) const {
  int64_t best = state.accepting ? 0 : Automaton::kNever;
  for (int32_t top : state.tops) {
    int64_t d = 0;
    for (int32_t f = top; f >= 0 && d < Automaton::kNever; f = frames_[f].parent) {
      d += automaton_->min_bytes_to_end(frames_[f].node);
    }
    best = std::min(best, d);
  }
  return best;
}

bool Matcher::Advance(std::string_view bytes, State* out) {
  if (bytes.empty()) {
    *out = state_;
    return true;
  }
  // The first byte from state_ itself; then between *out and a scratch state (no allocation once
  // their vectors have grown).
  Step(state_, static_cast<uint8_t>(bytes[0]), out);
  if (out->tops.empty() && !out->accepting) return false;
  for (size_t k = 1; k < bytes.size(); ++k) {
    Step(*out, static_cast<uint8_t>(bytes[k]), &advance_scratch_);
    if (advance_scratch_.tops.empty() && !advance_scratch_.accepting) return false;
    std::swap(*out, advance_scratch_);
  }
  return true;
}

bool Matcher::CanAccept(std::string_view bytes) { return Advance(bytes, &accept_scratch_); }

bool Matcher::Accept(std::string_view bytes) {
  if (!Advance(bytes, &accept_scratch_)) return false;
  std::swap(state_, accept_scratch_);
  return true;
}

}  // namespace tandem::grammar
