#include "grammar/matcher.h"

#include <algorithm>

namespace tandem::grammar {

Matcher::Matcher(std::shared_ptr<const Automaton> automaton) : automaton_(std::move(automaton)) {
  Reset();
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
    const Frame frame = frames_[f];
    for (const ByteEdge& e : automaton_->node(frame.node).bytes) {
      if (e.lo > byte) break;  // sorted by lo
      if (byte <= e.hi) Close(Intern(e.target, frame.parent), to);
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

bool Matcher::CanAccept(std::string_view bytes) {
  State a = state_, b;
  for (unsigned char c : bytes) {
    Step(a, c, &b);
    if (b.tops.empty() && !b.accepting) return false;
    std::swap(a, b);
  }
  return true;
}

bool Matcher::Accept(std::string_view bytes) {
  State a = state_, b;
  for (unsigned char c : bytes) {
    Step(a, c, &b);
    if (b.tops.empty() && !b.accepting) return false;
    std::swap(a, b);
  }
  state_ = std::move(a);
  return true;
}

}  // namespace tandem::grammar
