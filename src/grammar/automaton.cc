#include "grammar/automaton.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>

namespace tandem::grammar {

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  hi = std::min(hi, kMaxCodepoint);
  std::function<void(uint32_t, uint32_t)> split = [&](uint32_t a, uint32_t b) {
    if (a > b) return;
    if (a < 0xD800 && b > 0xDFFF) {  // the surrogates are no code points of UTF-8 text
      split(a, 0xD7FF);
      split(0xE000, b);
      return;
    }
    if (a >= 0xD800 && b <= 0xDFFF) return;
    if (a >= 0xD800 && a <= 0xDFFF) a = 0xE000;
    if (b >= 0xD800 && b <= 0xDFFF) b = 0xD7FF;
    if (a > b) return;
    // One encoded length at a time.
    for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (a <= edge && b > edge) {
        split(a, edge);
        split(edge + 1, b);
        return;
      }
    }
    const int n = a < 0x80 ? 1 : a < 0x800 ? 2 : a < 0x10000 ? 3 : 4;
    // Where a and b differ above the low 6*i bits, split so that every position is one range.
    for (int i = 1; i < n; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((a & ~m) != (b & ~m)) {
        if ((a & m) != 0) {
          split(a, a | m);
          split((a | m) + 1, b);
          return;
        }
        if ((b & m) != m) {
          split(a, (b & ~m) - 1);
          split(b & ~m, b);
          return;
        }
      }
    }
    std::string ea, eb;
    AppendUtf8(a, ea);
    AppendUtf8(b, eb);
    std::vector<std::pair<uint8_t, uint8_t>> seq;
    for (size_t k = 0; k < ea.size(); ++k) {
      seq.emplace_back(static_cast<uint8_t>(ea[k]), static_cast<uint8_t>(eb[k]));
    }
    out.push_back(std::move(seq));
  };
  split(lo, hi);
  return out;
}

namespace {

struct RawNode {
  std::vector<ByteEdge> bytes;
  std::vector<int> eps;
  std::vector<CallEdge> calls;
  bool final = false;
};

// Expression size in automaton nodes, roughly (for the inlining decision); saturates.
size_t EstimateSize(const Grammar& g, int expr, const std::vector<size_t>& rule_size) {
  const Expr& e = g.expr(expr);
  auto sat = [](size_t a, size_t b) { return std::min<size_t>(a + b, 1u << 30); };
  switch (e.kind) {
    case ExprKind::kEmpty: return 1;
    case ExprKind::kBytes: return e.bytes.size();
    case ExprKind::kCharClass: return 4 * (e.ranges.size() + 1);
    case ExprKind::kSequence:
    case ExprKind::kChoice: {
      size_t n = 1;
      for (int c : e.children) n = sat(n, EstimateSize(g, c, rule_size));
      return n;
    }
    case ExprKind::kRepeat: {
      const size_t times = static_cast<size_t>(e.max == kUnbounded ? e.min + 1 : e.max);
      return std::min<size_t>(sat(1, EstimateSize(g, e.children[0], rule_size) * times), 1u << 30);
    }
    case ExprKind::kRuleRef: return rule_size[static_cast<size_t>(e.rule)];
  }
  return 1;
}

// The nodes and byte edges Builder::Build creates for each expression, exactly (saturating at
// kCountCap), so that Compile refuses a grammar that is too large before building any of it:
// `(.{992}){83}` would otherwise cost ~25 ms of building up to the node cap, a nested counted
// repeat of 10^12 nodes as much, and a class of 64 one-byte ranges repeated 190 k times (few
// nodes, 12 M edges) 1.6 s and 134 MB. Compile's limits are checked on these counts alone (the
// Builder has no cap of its own), so this mirrors Builder::Build case for case; the grammar tests
// compare both counts with what was built.
constexpr size_t kCountCap = size_t{1} << 62;
size_t SatAdd(size_t a, size_t b) { return std::min(a + b, kCountCap); }  // a, b <= kCountCap
size_t SatMul(size_t a, size_t b) { return b != 0 && a > kCountCap / b ? kCountCap : a * b; }

Automaton::RawSize Plus(Automaton::RawSize a, Automaton::RawSize b) {
  return {SatAdd(a.nodes, b.nodes), SatAdd(a.byte_edges, b.byte_edges)};
}
Automaton::RawSize Times(size_t k, Automaton::RawSize a) { return {SatMul(k, a.nodes), SatMul(k, a.byte_edges)}; }

class RawCounter {
 public:
  using RawSize = Automaton::RawSize;
  RawCounter(const Grammar& g, const std::vector<char>& inline_rule)
      : g_(g), inline_(inline_rule), memo_(g.exprs().size()), known_(g.exprs().size(), 0) {}

  RawSize Count(int expr) {
    const size_t i = static_cast<size_t>(expr);
    if (!known_[i]) {
      memo_[i] = Compute(g_.expr(expr));
      known_[i] = 1;
    }
    return memo_[i];
  }

 private:
  // Builder::Chain: len - 1 new nodes, len byte edges.
  static RawSize Chain(size_t len) { return {len > 0 ? len - 1 : 0, len}; }

  RawSize Compute(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kEmpty: return {};
      case ExprKind::kBytes: return Chain(e.bytes.size());
      case ExprKind::kCharClass: {
        RawSize n;
        for (const CodepointRange& r : ClassCodepoints(e)) {
          for (const auto& seq : Utf8Sequences(r.lo, r.hi)) n = Plus(n, Chain(seq.size()));
        }
        return n;
      }
      case ExprKind::kSequence: {
        RawSize n{e.children.empty() ? 0 : e.children.size() - 1, 0};
        for (int c : e.children) n = Plus(n, Count(c));
        return n;
      }
      case ExprKind::kChoice: {
        RawSize n;
        for (int c : e.children) n = Plus(n, Count(c));
        return n;
      }
      case ExprKind::kRepeat: {  // as Builder::Build's kRepeat case
        const RawSize child = Count(e.children[0]);
        const RawSize step = Plus(child, {1, 0});
        const bool unbounded = e.max == kUnbounded;
        const size_t copies = static_cast<size_t>(unbounded && e.min > 0 ? e.min - 1 : e.min);
        const RawSize n = Times(copies, step);
        if (unbounded) return Plus(n, Plus(child, {2, 0}));
        return Plus(n, Times(static_cast<size_t>(std::max(e.max - e.min, 0)), step));
      }
      case ExprKind::kRuleRef:
        return inline_[static_cast<size_t>(e.rule)] ? Count(g_.rule(e.rule).body) : RawSize{};
    }
    return {};
  }

  const Grammar& g_;
  const std::vector<char>& inline_;
  std::vector<RawSize> memo_;
  std::vector<char> known_;
};

void CollectRefs(const Grammar& g, int expr, std::vector<int>* out) {
  const Expr& e = g.expr(expr);
  if (e.kind == ExprKind::kRuleRef) out->push_back(e.rule);
  for (int c : e.children) CollectRefs(g, c, out);
}

class Builder {
 public:
  // A reference to a rule in `inline_rule` is expanded in place (a copy of its body) instead of
  // a call edge: then a token mask needs no stack to decide it (automaton.h). `nodes`: what
  // RawCounter counted (Compile has checked it against its limits), reserved at once.
  Builder(const Grammar& g, std::vector<char> inline_rule, size_t nodes) : g_(g), inline_(std::move(inline_rule)) {
    raw_.reserve(nodes);
  }

  int New() {
    raw_.emplace_back();
    return static_cast<int>(raw_.size()) - 1;
  }
  std::vector<RawNode>& raw() { return raw_; }

  void Chain(const std::vector<std::pair<uint8_t, uint8_t>>& seq, int from, int to) {
    int cur = from;
    for (size_t k = 0; k < seq.size(); ++k) {
      const int next = k + 1 == seq.size() ? to : New();
      raw_[cur].bytes.push_back({seq[k].first, seq[k].second, next});
      cur = next;
    }
  }

  void Build(int expr, int from, int to) {
    const Expr& e = g_.expr(expr);
    switch (e.kind) {
      case ExprKind::kEmpty:
        raw_[from].eps.push_back(to);
        return;
      case ExprKind::kBytes: {
        std::vector<std::pair<uint8_t, uint8_t>> seq;
        for (unsigned char c : e.bytes) seq.emplace_back(c, c);
        Chain(seq, from, to);
        return;
      }
      case ExprKind::kCharClass: {
        for (const CodepointRange& r : ClassCodepoints(e)) {
          for (const auto& seq : Utf8Sequences(r.lo, r.hi)) Chain(seq, from, to);
        }
        return;
      }
      case ExprKind::kSequence: {
        int cur = from;
        for (size_t k = 0; k < e.children.size(); ++k) {
          const int next = k + 1 == e.children.size() ? to : New();
          Build(e.children[k], cur, next);
          cur = next;
        }
        return;
      }
      case ExprKind::kChoice:
        for (int c : e.children) Build(c, from, to);
        return;
      case ExprKind::kRepeat: {
        int cur = from;
        // x{min,} is x^(min-1) then x+, and x+ one copy of x in a loop (entry -x-> loop -eps->
        // entry), not x then x*: with two copies, nested unbounded repeats ("x++++...", found by
        // the grammar fuzzer) doubled the automaton at every level.
        const bool unbounded = e.max == kUnbounded;
        const int copies = unbounded && e.min > 0 ? e.min - 1 : e.min;
        for (int i = 0; i < copies; ++i) {
          const int next = New();
          Build(e.children[0], cur, next);
          cur = next;
        }
        if (unbounded) {
          const int entry = New(), loop = New();
          raw_[cur].eps.push_back(entry);
          Build(e.children[0], entry, loop);
          raw_[loop].eps.push_back(entry);
          if (e.min == 0) raw_[entry].eps.push_back(to);
          raw_[loop].eps.push_back(to);
          return;
        }
        for (int i = e.min; i < e.max; ++i) {
          raw_[cur].eps.push_back(to);
          const int next = New();
          Build(e.children[0], cur, next);
          cur = next;
        }
        raw_[cur].eps.push_back(to);
        return;
      }
      case ExprKind::kRuleRef:
        if (inline_[static_cast<size_t>(e.rule)]) {
          Build(g_.rule(e.rule).body, from, to);
        } else {
          raw_[from].calls.push_back({e.rule, to});
        }
        return;
    }
  }

 private:
  const Grammar& g_;
  std::vector<RawNode> raw_;
  std::vector<char> inline_;
};

// Rules that can be inlined: not recursive (no rule reaches itself through references), and small.
// Recursion by Tarjan's strongly connected components, iterative (a hostile grammar may chain
// hundreds of thousands of rules): linear in rules and references, where a search from every rule
// was quadratic (16 k rules took ~0.5 s). Tarjan finishes a component after every component it
// reaches, so sizes are measured in that order, bottom-up; recursive rules count as a call.
std::vector<char> InlinableRules(const Grammar& g, size_t max_inline) {
  const size_t n = g.rules().size();
  std::vector<std::vector<int>> refs(n);
  for (size_t r = 0; r < n; ++r) CollectRefs(g, g.rule(static_cast<int>(r)).body, &refs[r]);
  constexpr int kUnvisited = -1;
  std::vector<int> index(n, kUnvisited), low(n, 0);
  std::vector<char> on_stack(n, 0), recursive(n, 0);
  std::vector<int> stack, finished;  // finished: rules in the order their components completed
  std::vector<std::pair<int, size_t>> calls;  // (rule, next reference to follow)
  int next_index = 0;
  for (size_t root = 0; root < n; ++root) {
    if (index[root] != kUnvisited) continue;
    calls.emplace_back(static_cast<int>(root), 0);
    index[root] = low[root] = next_index++;
    stack.push_back(static_cast<int>(root));
    on_stack[root] = 1;
    while (!calls.empty()) {
      auto& [v, k] = calls.back();
      if (k < refs[v].size()) {
        const int w = refs[v][k++];
        if (w == v) recursive[v] = 1;
        if (index[w] == kUnvisited) {
          index[w] = low[w] = next_index++;
          stack.push_back(w);
          on_stack[w] = 1;
          calls.emplace_back(w, 0);
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      const int done = v;
      calls.pop_back();
      if (!calls.empty()) low[calls.back().first] = std::min(low[calls.back().first], low[done]);
      if (low[done] != index[done]) continue;
      size_t first = stack.size();
      do {
        --first;
      } while (stack[first] != done);
      const bool cycle = stack.size() - first > 1;
      for (size_t i = first; i < stack.size(); ++i) {
        on_stack[stack[i]] = 0;
        recursive[stack[i]] = recursive[stack[i]] || cycle;
        finished.push_back(stack[i]);
      }
      stack.resize(first);
    }
  }
  std::vector<size_t> size(n, 1);
  std::vector<char> out(n, 0);
  for (int r : finished) {
    if (recursive[r]) continue;
    size[r] = EstimateSize(g, g.rule(r).body, size);
    out[r] = size[r] <= max_inline;
  }
  return out;
}

// Everything the Builder makes: two nodes for each rule (its start and end), then its body's.
Automaton::RawSize RawCount(const Grammar& g, const std::vector<char>& inline_rule) {
  RawCounter counter(g, inline_rule);
  Automaton::RawSize n;
  for (size_t r = 0; r < g.rules().size(); ++r) {
    n = Plus(n, Plus({2, 0}, counter.Count(g.rule(static_cast<int>(r)).body)));
  }
  return n;
}

}  // namespace

Result<Automaton::RawSize> Automaton::CountRaw(const Grammar& g) {
  TANDEM_RETURN_IF_ERROR(g.Validate());
  return RawCount(g, InlinableRules(g, /*max_inline=*/4096));
}

Result<Automaton> Automaton::Compile(const Grammar& g, size_t max_nodes, size_t max_closure_steps) {
  TANDEM_RETURN_IF_ERROR(g.Validate());
  std::vector<char> inline_rule = InlinableRules(g, /*max_inline=*/4096);
  const size_t num_rules = g.rules().size();
  const RawSize raw_size = RawCount(g, inline_rule);
  if (raw_size.nodes > max_nodes) {
    return Err(StatusCode::kInvalidArgument, "grammar too large: over {} automaton nodes", max_nodes);
  }
  const size_t max_edges = SatMul(kMaxByteEdgesPerNode, max_nodes);
  if (raw_size.byte_edges > max_edges) {
    return Err(StatusCode::kInvalidArgument, "grammar too large: over {} automaton byte edges", max_edges);
  }
  Builder b(g, std::move(inline_rule), raw_size.nodes);
  std::vector<int> raw_start(num_rules);
  for (size_t r = 0; r < num_rules; ++r) {
    const int s = b.New();
    const int e = b.New();
    b.raw()[e].final = true;
    raw_start[r] = s;
    b.Build(g.rule(static_cast<int>(r)).body, s, e);
  }
  std::vector<RawNode>& raw = b.raw();

  // Epsilon elimination, keeping the nodes reachable from a rule start.
  std::vector<int> index(raw.size(), -1);
  std::vector<int> order;
  auto visit = [&](int n) {
    if (index[n] < 0) {
      index[n] = static_cast<int>(order.size());
      order.push_back(n);
    }
  };
  visit(raw_start[static_cast<size_t>(g.root())]);  // and the rules called (below); inlined ones are in place
  Automaton a;
  a.raw_size_.nodes = raw.size();
  for (const RawNode& n : raw) a.raw_size_.byte_edges += n.bytes.size();
  std::vector<int> stack;
  std::vector<char> seen(raw.size(), 0);
  size_t steps = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    Node node;
    stack.assign(1, order[k]);
    std::vector<int> closure;
    while (!stack.empty()) {
      int n = stack.back();
      stack.pop_back();
      if (seen[n]) continue;
      seen[n] = 1;
      closure.push_back(n);
      steps += 1 + raw[n].bytes.size() + raw[n].calls.size();
      for (int m : raw[n].eps) stack.push_back(m);
    }
    if (steps > max_closure_steps) {
      return Err(StatusCode::kInvalidArgument,
                 "grammar too large: over {} steps to expand its empty transitions (a repetition of "
                 "something that can be empty?)",
                 max_closure_steps);
    }
    for (int n : closure) {
      seen[n] = 0;
      node.final = node.final || raw[n].final;
      for (const ByteEdge& e : raw[n].bytes) {
        visit(e.target);
        node.bytes.push_back(e);
      }
      for (const CallEdge& c : raw[n].calls) {
        visit(c.ret);
        visit(raw_start[static_cast<size_t>(c.rule)]);
        node.calls.push_back(c);
      }
    }
    a.nodes_.push_back(std::move(node));
  }
  for (Node& node : a.nodes_) {
    for (ByteEdge& e : node.bytes) e.target = index[e.target];
    for (CallEdge& c : node.calls) c.ret = index[c.ret];
    std::sort(node.bytes.begin(), node.bytes.end(), [](const ByteEdge& x, const ByteEdge& y) {
      return x.lo != y.lo ? x.lo < y.lo : x.target < y.target;
    });
  }
  for (int s : raw_start) a.starts_.push_back(index[s]);  // -1: a rule never called
  for (const Rule& r : g.rules()) a.names_.push_back(r.name);
  a.root_ = g.root();

  // Nullable rules, and the rules each can call before its first byte (left): a cycle there is left
  // recursion. A rule's nodes are reached from its start through calls of nullable rules (to their
  // return node); a call of a rule not yet known to be nullable waits until it is (a worklist), so
  // each node is explored once: a fixpoint over every rule until nothing changed was cubic (8 k
  // chained rules of 170 KB took 5.8 s). Nodes belong to one rule each (a call returns into the
  // caller's own body), so one explored flag a node serves every rule.
  std::vector<char> nullable(num_rules, 0), explored(a.nodes_.size(), 0);
  std::vector<std::vector<int>> left(num_rules);
  std::vector<std::vector<std::pair<int, int>>> waiting(num_rules);  // callee -> (caller, return node)
  std::vector<int> found_nullable, todo;
  // callees: null while nullability is being found (calls of rules not yet nullable wait); once it
  // is settled, the rules r calls before its first byte.
  auto explore = [&](int r, int from, std::vector<int>* callees) {
    todo.assign(1, from);
    while (!todo.empty()) {
      const int n = todo.back();
      todo.pop_back();
      if (explored[n]) continue;
      explored[n] = 1;
      if (a.nodes_[n].final && !nullable[r]) {
        nullable[r] = 1;
        found_nullable.push_back(r);
      }
      for (const CallEdge& c : a.nodes_[n].calls) {
        if (callees) callees->push_back(c.rule);
        if (nullable[c.rule]) todo.push_back(c.ret);
        else if (!callees) waiting[c.rule].emplace_back(r, c.ret);
      }
    }
  };
  for (size_t r = 0; r < num_rules; ++r) {
    if (a.starts_[r] >= 0) explore(static_cast<int>(r), a.starts_[r], nullptr);
  }
  while (!found_nullable.empty()) {
    const int c = found_nullable.back();
    found_nullable.pop_back();
    std::vector<std::pair<int, int>> woken = std::move(waiting[c]);
    waiting[c].clear();
    for (const auto& [r, ret] : woken) explore(r, ret, nullptr);
  }
  // With the nullable set settled, `left` in the order of a plain search from each rule's start
  // (one more linear pass), so a left recursion is named as it always was.
  std::fill(explored.begin(), explored.end(), 0);
  for (size_t r = 0; r < num_rules; ++r) {
    if (a.starts_[r] >= 0) explore(static_cast<int>(r), a.starts_[r], &left[r]);
  }
  // A cycle in `left`, by a depth-first search with its own stack (a chain of rules may be long).
  std::vector<int> state(num_rules, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int, size_t>> path;  // (rule, next callee to follow)
  for (size_t root = 0; root < num_rules; ++root) {
    if (state[root] != 0) continue;
    state[root] = 1;
    path.emplace_back(static_cast<int>(root), 0);
    while (!path.empty()) {
      auto& [r, k] = path.back();
      if (k == left[r].size()) {
        state[r] = 2;
        path.pop_back();
        continue;
      }
      const int c = left[r][k++];
      if (state[c] == 1) {
        return Err(StatusCode::kInvalidArgument,
                   "grammar: rule '{}' is left-recursive (it can reach itself before any text)",
                   g.rule(c).name);
      }
      if (state[c] == 0) {
        state[c] = 1;
        path.emplace_back(c, 0);
      }
    }
  }
  // The fewest bytes to each node's rule end: the least solution of d(n) = 0 where final, else the
  // least of 1 + d(target) over byte edges and d(callee's start) + d(return) over calls, by Knuth's
  // generalization of Dijkstra (1977; both are superior functions): a node is settled as it leaves
  // the queue. Relaxing every node until nothing changed settled one call level a sweep (a 1 MB
  // spec of 30 k rules each calling the one before took 7 s).
  auto add = [](int64_t x, int64_t y) { return std::min<int64_t>(x + y, kNever); };
  const size_t num_nodes = a.nodes_.size();
  std::vector<std::vector<int>> byte_preds(num_nodes);
  std::vector<std::vector<std::pair<int, int>>> call_deps(num_nodes);  // (calling node, call index)
  for (size_t k = 0; k < num_nodes; ++k) {
    const Node& node = a.nodes_[k];
    for (const ByteEdge& e : node.bytes) byte_preds[e.target].push_back(static_cast<int>(k));
    for (size_t i = 0; i < node.calls.size(); ++i) {
      const CallEdge& c = node.calls[i];
      call_deps[a.starts_[c.rule]].emplace_back(static_cast<int>(k), static_cast<int>(i));
      if (c.ret != a.starts_[c.rule]) call_deps[c.ret].emplace_back(static_cast<int>(k), static_cast<int>(i));
    }
  }
  std::vector<int32_t>& d = a.min_to_end_;
  d.assign(num_nodes, kNever);
  std::vector<char> settled(num_nodes, 0);
  using Item = std::pair<int32_t, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> queue;
  auto offer = [&](int n, int64_t v) {
    if (v < d[n]) queue.emplace(d[n] = static_cast<int32_t>(v), n);
  };
  for (size_t k = 0; k < num_nodes; ++k) {
    if (a.nodes_[k].final) offer(static_cast<int>(k), 0);
  }
  while (!queue.empty()) {
    const auto [v, n] = queue.top();
    queue.pop();
    if (settled[n] || v != d[n]) continue;
    settled[n] = 1;
    for (int p : byte_preds[n]) {
      if (!settled[p]) offer(p, add(1, v));
    }
    for (const auto& [p, i] : call_deps[n]) {
      const CallEdge& c = a.nodes_[p].calls[i];
      const int s = a.starts_[c.rule];
      if (!settled[p] && settled[s] && settled[c.ret]) offer(p, add(d[s], d[c.ret]));
    }
  }
  if (a.min_to_end_[a.starts_[a.root_]] == kNever) {
    return Status(StatusCode::kInvalidArgument, "grammar: the root rule can never end (no finite text matches it)");
  }
  // Edges into what can never end are dropped: a matcher never enters a state it cannot leave
  // (a rule like x ::= "c" x beside a finite alternative would otherwise let an output run on).
  for (Node& node : a.nodes_) {
    std::erase_if(node.bytes, [&](const ByteEdge& e) { return a.min_to_end_[e.target] == kNever; });
    std::erase_if(node.calls, [&](const CallEdge& c) {
      return a.min_to_end_[a.starts_[c.rule]] == kNever || a.min_to_end_[c.ret] == kNever;
    });
  }
  return a;
}

}  // namespace tandem::grammar
