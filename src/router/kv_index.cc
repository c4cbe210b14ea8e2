#include "router/kv_index.h"

#include <algorithm>
#include <bit>
#include <cassert>

namespace tandem::router {

namespace {

// The walk issues the table probe of block depth + kTableAhead where that block is not the node
// after the one the current run of nodes puts there (a chain jumps or ends), and prefetches the
// node line kNodeAhead nodes ahead, which that guess reads kNodeAhead - kTableAhead steps later.
// A walk step is a few ns and a probe an L3 or DRAM access (tens to ~100 ns). Measured on the
// chat mix of bench/router_bench (a jump or two and the uncached tail per prompt): 8 ahead beat
// 16 and 24, whose extra probes past the last cached block are wasted (dev/router/results/).
constexpr size_t kTableAhead = 8;
constexpr size_t kNodeAhead = 16;
constexpr double kMaxLoadFactor = 0.7;

size_t CapacityFor(size_t num_blocks) {
  size_t cap = 16;
  while (static_cast<double>(num_blocks) > kMaxLoadFactor * static_cast<double>(cap)) cap *= 2;
  return cap;
}

int WordsFor(int max_workers) { return std::max(1, (max_workers + 63) / 64); }

}  // namespace

KvIndex::KvIndex(int max_workers, size_t expected_blocks) {
  assert(max_workers >= 1 && max_workers <= kMaxWorkers);
  Rebuild(CapacityFor(expected_blocks), WordsFor(max_workers));
}

uint64_t KvIndex::Key(uint64_t block_hash) {
  // 0 marks an empty slot; a block hash of 0 (probability 2^-64) is stored under another value.
  return block_hash != 0 ? block_hash : 0x9E3779B97F4A7C15ull;
}

size_t KvIndex::Probe(uint64_t key) const {
  size_t i = Home(key);
  for (;;) {
    const uint64_t k = table_[2 * i];
    if (k == key || k == 0) return i;
    i = (i + 1) & mask_;
  }
}

void KvIndex::Rebuild(size_t capacity, int num_words) {
  Buffer old;
  old.swap(nodes_);
  const size_t old_stride = stride();
  const int old_words = num_words_;

  num_words_ = num_words;
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
  table_.assign(2 * capacity, 0);
  nodes_.reserve(std::max(old.size() / old_stride, size_t{16}) * stride());
  num_nodes_ = 0;
  num_holes_ = 0;
  worker_blocks_.resize(static_cast<size_t>(max_workers()), 0);
  present_.resize(static_cast<size_t>(num_words_), 0);

  for (size_t off = 0; off < old.size(); off += old_stride) {
    const uint64_t key = old[off];
    if (key == 0) continue;  // a hole
    bool any = false;
    for (int k = 0; k < old_words; ++k) any |= old[off + 1 + k] != 0;
    if (!any) continue;  // emptied by RemoveWorker
    const size_t slot = Probe(key);
    table_[2 * slot] = key;
    table_[2 * slot + 1] = num_nodes_;
    nodes_.push_back(key);
    for (int k = 0; k < num_words_; ++k) nodes_.push_back(k < old_words ? old[off + 1 + k] : 0);
    ++num_nodes_;
  }
}

void KvIndex::ReserveWorkers(int max_workers) {
  assert(max_workers <= kMaxWorkers);
  const int words = WordsFor(max_workers);
  if (words > num_words_) Rebuild(capacity(), words);
}

void KvIndex::Store(int worker, uint64_t block_hash) {
  assert(worker >= 0);
  if (worker >= max_workers()) ReserveWorkers(worker + 1);
  if (static_cast<double>(num_nodes_ + 1) > kMaxLoadFactor * static_cast<double>(capacity())) {
    Rebuild(capacity() * 2, num_words_);
  }
  const uint64_t key = Key(block_hash);
  const size_t slot = Probe(key);
  if (table_[2 * slot] == 0) {  // a new node, after the last one
    table_[2 * slot] = key;
    table_[2 * slot + 1] = num_nodes_ + num_holes_;
    nodes_.push_back(key);
    nodes_.resize(nodes_.size() + static_cast<size_t>(num_words_), 0);
    ++num_nodes_;
  }
  uint64_t* node = Node(table_[2 * slot + 1]);
  const uint64_t bit = uint64_t{1} << (worker % 64);
  uint64_t& word = node[1 + worker / 64];
  if (word & bit) return;
  word |= bit;
  ++worker_blocks_[worker];
  present_[worker / 64] |= bit;
}

void KvIndex::Remove(int worker, uint64_t block_hash) {
  if (worker < 0 || worker >= max_workers()) return;
  const size_t slot = Probe(Key(block_hash));
  if (table_[2 * slot] == 0) return;
  uint64_t* node = Node(table_[2 * slot + 1]);
  const uint64_t bit = uint64_t{1} << (worker % 64);
  uint64_t& word = node[1 + worker / 64];
  if (!(word & bit)) return;
  word &= ~bit;
  if (--worker_blocks_[worker] == 0) present_[worker / 64] &= ~bit;
  for (int k = 0; k < num_words_; ++k) {
    if (node[1 + k] != 0) return;
  }
  node[0] = 0;  // a hole
  --num_nodes_;
  ++num_holes_;
  EraseSlot(slot);
  if (num_holes_ > 1024 && num_holes_ > num_nodes_) Compact();
}

void KvIndex::Compact() {
  // In place and in order; the table keeps its slots, only their node indices change (one
  // sequential pass over each array instead of rehashing every key).
  const size_t st = stride();
  const size_t total = num_nodes_ + num_holes_;
  assert(total < (size_t{1} << 32));
  std::vector<uint32_t> remap(total);
  size_t out = 0;
  for (size_t index = 0; index < total; ++index) {
    const uint64_t* node = Node(index);
    if (node[0] == 0) continue;
    remap[index] = static_cast<uint32_t>(out);
    if (out != index) std::copy(node, node + st, Node(out));
    ++out;
  }
  assert(out == num_nodes_);
  nodes_.resize(out * st);
  for (size_t slot = 0; slot <= mask_; ++slot) {
    if (table_[2 * slot] != 0) table_[2 * slot + 1] = remap[table_[2 * slot + 1]];
  }
  num_holes_ = 0;
}

void KvIndex::EraseSlot(size_t slot) {
  // Backward-shift deletion: pull later entries of the probe run into the hole when their home
  // slot does not lie cyclically in (hole, entry].
  size_t hole = slot;
  size_t j = slot;
  for (;;) {
    j = (j + 1) & mask_;
    const uint64_t key = table_[2 * j];
    if (key == 0) break;
    const size_t home = Home(key);
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    table_[2 * hole] = key;
    table_[2 * hole + 1] = table_[2 * j + 1];
    hole = j;
  }
  table_[2 * hole] = 0;
  table_[2 * hole + 1] = 0;
}

void KvIndex::RemoveWorker(int worker) {
  if (worker < 0 || worker >= max_workers() || worker_blocks_[worker] == 0) return;
  const size_t st = stride();
  const uint64_t keep = ~(uint64_t{1} << (worker % 64));
  for (size_t off = 1 + worker / 64; off < nodes_.size(); off += st) nodes_[off] &= keep;
  worker_blocks_[worker] = 0;
  present_[worker / 64] &= keep;
  Rebuild(capacity(), num_words_);  // drops the nodes no worker holds any more
}

void KvIndex::FindMatches(std::span<const uint64_t> block_hashes, std::span<int> overlap) const {
  assert(overlap.size() <= static_cast<size_t>(max_workers()));
  std::fill(overlap.begin(), overlap.end(), 0);
  const int nw = num_words_;
  uint64_t active[kMaxWorkers / 64];
  int lo = nw, hi = -1;  // the first and last words with an active worker
  for (int k = 0; k < nw; ++k) {
    const size_t first = static_cast<size_t>(k) * 64;
    uint64_t m = present_[k];
    if (first >= overlap.size()) m = 0;
    else if (overlap.size() - first < 64) m &= (uint64_t{1} << (overlap.size() - first)) - 1;
    active[k] = m;
    if (m) {
      lo = std::min(lo, k);
      hi = k;
    }
  }
  if (hi < 0) return;
  // One word holds every worker that can match (<= 64 workers, or a slot past them freed): the
  // walk keeps that word in a register.
  if (lo == hi) return FindMatches1(block_hashes, overlap, lo, active[lo]);

  const uint64_t* const table = table_.data();
  const uint64_t* const nodes = nodes_.data();
  const size_t st = stride();
  const size_t num_entries = num_nodes_ + num_holes_;
  const size_t n = block_hashes.size();
  for (size_t d = 0; d < std::min(n, kTableAhead); ++d) {
    __builtin_prefetch(table + 2 * Home(Key(block_hashes[d])));
  }
  size_t depth = 0;
  size_t index = ~size_t{0};  // the previous block's node
  for (; depth < n; ++depth) {
    if (depth + kTableAhead < n) {  // as in FindMatches1
      const uint64_t ahead = Key(block_hashes[depth + kTableAhead]);
      const size_t at = index + 1 + kTableAhead;
      __builtin_prefetch(nodes + std::min(index + 1 + kNodeAhead, num_entries) * st);
      if (at >= num_entries || nodes[at * st] != ahead) __builtin_prefetch(table + 2 * Home(ahead));
    }
    const uint64_t key = Key(block_hashes[depth]);
    ++index;  // the next node of the same stored chain, if it holds this hash
    if (index >= num_entries || nodes[index * st] != key) {
      size_t i = Home(key);
      uint64_t k;
      while ((k = table[2 * i]) != key && k != 0) i = (i + 1) & mask_;
      if (k == 0) break;
      index = table[2 * i + 1];
    }
    const uint64_t* node = nodes + index * st;
    uint64_t still = 0;
    for (int k = lo; k <= hi; ++k) {
      uint64_t dropped = active[k] & ~node[1 + k];
      while (dropped) {  // workers whose prefix ends here matched `depth` blocks
        overlap[static_cast<size_t>(k) * 64 + std::countr_zero(dropped)] = static_cast<int>(depth);
        dropped &= dropped - 1;
      }
      active[k] &= node[1 + k];
      still |= active[k];
    }
    if (!still) return;
  }
  for (int k = lo; k <= hi; ++k) {
    for (uint64_t m = active[k]; m; m &= m - 1) {
      overlap[static_cast<size_t>(k) * 64 + std::countr_zero(m)] = static_cast<int>(depth);
    }
  }
}

void KvIndex::FindMatches1(std::span<const uint64_t> block_hashes, std::span<int> overlap,
                           int word, uint64_t active) const {
  // The same walk as FindMatches with the one word of bitset in a register.
  const uint64_t* const table = table_.data();
  const uint64_t* const nodes = nodes_.data();
  const size_t st = stride();
  const size_t num_entries = num_nodes_ + num_holes_;
  const size_t n = block_hashes.size();
  const uint64_t* hashes = block_hashes.data();
  int* const out = overlap.data() + static_cast<size_t>(word) * 64;
  for (size_t d = 0; d < std::min(n, kTableAhead); ++d) {
    __builtin_prefetch(table + 2 * Home(Key(hashes[d])));
  }
  size_t depth = 0;
  size_t index = ~size_t{0};
  for (; depth < n; ++depth) {
    if (depth + kTableAhead < n) {
      // The table is only needed where a chain jumps: not for a block that sits where the current
      // run of nodes would put it (a guess: a miss here costs one wasted prefetch).
      const uint64_t ahead = Key(hashes[depth + kTableAhead]);
      const size_t at = index + 1 + kTableAhead;
      // The node a guess kNodeAhead - kTableAhead steps later reads (in cache by then).
      __builtin_prefetch(nodes + std::min(index + 1 + kNodeAhead, num_entries) * st);
      if (at >= num_entries || nodes[at * st] != ahead) {
        __builtin_prefetch(table + 2 * Home(ahead));
      }
    }
    const uint64_t key = Key(hashes[depth]);
    ++index;
    if (index >= num_entries || nodes[index * st] != key) {
      size_t i = Home(key);
      uint64_t k;
      while ((k = table[2 * i]) != key && k != 0) i = (i + 1) & mask_;
      if (k == 0) break;
      index = table[2 * i + 1];
    }
    const uint64_t bits = nodes[index * st + 1 + word];
    uint64_t dropped = active & ~bits;
    while (dropped) {  // workers whose prefix ends here matched `depth` blocks
      out[std::countr_zero(dropped)] = static_cast<int>(depth);
      dropped &= dropped - 1;
    }
    active &= bits;
    if (!active) return;
  }
  for (uint64_t m = active; m; m &= m - 1) out[std::countr_zero(m)] = static_cast<int>(depth);
}

bool KvIndex::Contains(int worker, uint64_t block_hash) const {
  if (worker < 0 || worker >= max_workers()) return false;
  const size_t slot = Probe(Key(block_hash));
  if (table_[2 * slot] == 0) return false;
  return Node(table_[2 * slot + 1])[1 + worker / 64] >> (worker % 64) & 1;
}
size_t KvIndex::num_blocks(int worker) const {
  if (worker < 0 || worker >= max_workers()) return 0;
  return worker_blocks_[worker];
}

}  // namespace tandem::router
