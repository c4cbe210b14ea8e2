// Automaton: a Grammar (grammar.h) compiled to a byte-level pushdown automaton: one NFA per rule,
// without epsilon moves, whose nodes share one index space. A node has
//   byte edges  (a byte range and the node it leads to),
//   call edges  (enter a rule at its start node; when that rule ends, go on at `ret`), and
//   final       (the rule may end here).
// Code points are encoded as UTF-8 byte-range chains (surrogates excluded), so a matcher runs on
// the bytes of tokens directly. A reference to a rule that is not recursive and small (about 4096
// nodes at most) is compiled in place, not as a call, so that most of a token mask can be decided
// per node without looking at the stack (matcher.h, token_mask.h). Left recursion (a rule that can reach itself before consuming a
// byte) is refused: the matcher's closure would not terminate on it.
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "grammar/grammar.h"

namespace tandem::grammar {

struct ByteEdge {
  uint8_t lo = 0;
  uint8_t hi = 0;
  int32_t target = -1;
};

struct CallEdge {
  int32_t rule = -1;
  int32_t ret = -1;  // the node to go on at once the rule ended
};

struct Node {
  std::vector<ByteEdge> bytes;
  std::vector<CallEdge> calls;
  bool final = false;
};

class Automaton {
 public:
  // Limits: at most `max_nodes` nodes after expanding repetitions, and at most `max_closure_steps`
  // steps of epsilon elimination (closure nodes visited plus edges copied; else InvalidArgument:
  // the grammar is too large). The second bounds repetitions of something that can be empty:
  // `((a?){1000}){20}` has 20k nodes but each one's closure reaches all later ones, 2 x 10^8
  // edges (9 s and 1.6 GB here before the limit); real JSON schemas take under 10^4 steps.
  // 200 k nodes (2 M, then 500 k, until 2026-12-07: nested counted repeats reaching 2 M cost 0.94 s
  // and 233 MB in the release build; `(.{992}){83}`, 12 bytes of a client's regex with a UTF-8 dot
  // of ~7 nodes, still took 160-330 ms to reach 500 k, and over 10 s in the ASan fuzz build; 200 k
  // is 2.5x sooner, and 20x what `[a-z]{1,10000}` needs). InvalidArgument for a left-recursive
  // rule, naming it, and for Grammar::Validate's errors.
  // Also at most kMaxByteEdgesPerNode * max_nodes byte edges (2 M by default; a class of many
  // separate ranges adds edges, not nodes). Both counts are computed from the grammar before
  // anything is built (CountRaw), so a grammar over either limit is refused in time linear in its
  // size, whatever its repeats expand to.
  static Result<Automaton> Compile(const Grammar& g, size_t max_nodes = 200'000,
                                   size_t max_closure_steps = 2'000'000);
  static constexpr size_t kMaxByteEdgesPerNode = 10;
  // What Compile builds before epsilon elimination (what its limits count).
  struct RawSize {
    size_t nodes = 0;
    size_t byte_edges = 0;
  };
  // The nodes and byte edges Compile builds for `g`, each saturating at 2^62; Grammar::Validate's
  // error for an invalid grammar.
  static Result<RawSize> CountRaw(const Grammar& g);
  // What this automaton was built with (= CountRaw).
  RawSize raw_size() const { return raw_size_; }

  const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  size_t num_nodes() const { return nodes_.size(); }
  int start(int rule) const { return starts_[static_cast<size_t>(rule)]; }  // -1: never called
  int root_rule() const { return root_; }
  const std::string& rule_name(int rule) const { return names_[static_cast<size_t>(rule)]; }
  // The fewest bytes from node i to the end of its rule (calls included), kNever when it cannot
  // end. Compile refuses a grammar whose root can never end, and drops the edges into nodes and
  // rules that can never end, so that every state a matcher reaches can still complete.
  static constexpr int32_t kNever = INT32_MAX;
  int32_t min_bytes_to_end(int i) const { return min_to_end_[static_cast<size_t>(i)]; }

 private:
  std::vector<Node> nodes_;
  std::vector<int> starts_;
  std::vector<std::string> names_;
  std::vector<int32_t> min_to_end_;
  int root_ = -1;
  RawSize raw_size_;
};

// UTF-8 byte-range sequences covering the code points [lo, hi] (surrogates D800-DFFF left out):
// each inner vector is one sequence of {lo, hi} byte ranges, one per encoded byte. The usual
// construction (as in RE2 and Rust's regex-syntax utf8 module).
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(uint32_t lo, uint32_t hi);

}  // namespace tandem::grammar
