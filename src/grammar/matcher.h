// Matcher: where one output stands in its grammar's pushdown automaton (automaton.h), advanced
// byte by byte. Its state is the set of stacks the bytes so far can have led to (the automaton is
// nondeterministic); the stacks share their frames in an arena where each (node, parent frame)
// pair exists once, so a set of stacks is a sorted vector of top-frame indexes and advancing or
// trying bytes never copies a stack (the persistent stack of xgrammar, arXiv:2411.15100 section 3).
// Not thread-safe; one per request.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"

namespace tandem::grammar {

class Matcher {
 public:
  // A set of stacks: top frames (sorted, unique), and whether the root rule may end here.
  // context_end: a stack whose bottom is kUnknownParent ended its rule here (token_mask.h uses
  // such stacks to decide tokens for a node whatever the stack below it).
  struct State {
    std::vector<int32_t> tops;
    bool accepting = false;
    bool context_end = false;
    bool operator==(const State&) const = default;
  };
  static constexpr int32_t kNoParent = -1;       // the root rule's frame
  static constexpr int32_t kUnknownParent = -2;  // a stack cut off below (token_mask.h)

  explicit Matcher(std::shared_ptr<const Automaton> automaton);

  // Advances over `bytes`. False, and the state unchanged, when they cannot follow.
  bool Accept(std::string_view bytes);
  // Whether `bytes` could follow, without advancing.
  bool CanAccept(std::string_view bytes);
  // The root rule may end here (end of sequence allowed).
  bool IsAccepting() const { return state_.accepting; }
  // No byte can follow (then only the end may, if IsAccepting()).
  bool IsComplete() const { return state_.tops.empty(); }

  const State& state() const { return state_; }
  void Reset();  // back to the start
  // The fewest bytes that complete `state` (its best stack), Automaton::kNever when none does.
  int64_t MinBytesToComplete(const State& state) const;
  // `from` advanced over one byte into `*to` (empty when it cannot follow). `to` != &from.
  void Step(const State& from, uint8_t byte, State* to);
  size_t num_frames() const { return frames_.size(); }
  // The frame for `node` over `parent` (a frame, or kNoParent / kUnknownParent), made when new.
  int32_t FrameOf(int32_t node, int32_t parent) { return Intern(node, parent); }
  int32_t NodeOf(int32_t frame) const { return frames_[static_cast<size_t>(frame)].node; }
  const Automaton& automaton() const { return *automaton_; }

  // States by number, with their transitions memoized: the DFA of the sets of stacks, built as it
  // is walked (the token-mask walks of token_mask.h meet the same states again and again, e.g.
  // inside a string every byte leads back to the same state). Numbers stay valid until
  // ClearStateTable(). kDeadState: no stack and no end.
  // The table is flat (256 transitions per state, -1 not yet known, one flag byte per state) so
  // that a walk's step is one load from a few hot rows.
  static constexpr int32_t kDeadState = 0;
  static constexpr uint8_t kNoTops = 1;       // StateFlags: no byte can follow
  static constexpr uint8_t kContextEnd = 2;   // StateFlags: State::context_end
  int32_t StateId(const State& state);
  const State& StateById(int32_t id) const { return states_[static_cast<size_t>(id)]; }
  uint8_t StateFlags(int32_t id) const { return flags_[static_cast<size_t>(id)]; }
  int32_t StepId(int32_t id, uint8_t byte) {
    const int32_t to = next_[static_cast<size_t>(id) * 256 + byte];
    return to >= 0 ? to : StepSlow(id, byte);
  }
  size_t num_states() const { return states_.size(); }
  void ClearStateTable();

 private:
  struct Frame {
    int32_t node;
    int32_t parent;  // the caller's frame (its node: where to go on), -1 for the root
    // Where succ_ holds the frame each byte edge of `node` leads to (over `parent`), -1 until the
    // frame is first stepped from.
    int32_t succ = -1;
  };
  int32_t Intern(int32_t node, int32_t parent);
  // The state after `bytes` from the current one into *out; false when one of them cannot follow.
  bool Advance(std::string_view bytes, State* out);
  // Adds frame f's closure (calls entered, ended rules returned from) to `out`.
  void Close(int32_t f, State* out);

  std::shared_ptr<const Automaton> automaton_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, int32_t> index_;
  // Per stepped frame, one entry per byte edge of its node: the target's frame, -1 until the edge
  // is first taken. Step looks frames up here instead of interning them again: a state can hold
  // hundreds of frames (a regex of many `.` and `.*`), each byte crossing thousands of edges.
  std::vector<int32_t> succ_;
  std::vector<int32_t> work_;
  std::vector<uint32_t> mark_;  // per frame: the Close() pass that added it
  uint32_t pass_ = 0;
  State state_;
  int32_t StepSlow(int32_t id, uint8_t byte);  // computes and memoizes one transition
  std::vector<State> states_;   // by id; [kDeadState] is the dead state
  std::vector<int32_t> next_;   // [num_states * 256]
  std::vector<uint8_t> flags_;  // [num_states]
  std::unordered_map<uint64_t, std::vector<int32_t>> table_index_;  // state hash -> ids
  State step_scratch_;
  State advance_scratch_, accept_scratch_;  // Advance/Accept/CanAccept reuse these, not allocate
};

}  // namespace tandem::grammar
