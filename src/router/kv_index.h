// KvIndex: which workers have which KV blocks cached, for KV-aware routing (DESIGN.md section 4).
//
// The shape of Dynamo's KvIndexer (lib/llm/src/kv_router/indexer.rs): a radix tree whose nodes are
// blocks and whose root-to-node paths are token prefixes; each node holds the set of workers that
// have that block cached; a prompt's block hashes walk down from the root, and a worker's overlap is
// the number of leading prompt blocks it has (the longest matched prefix, in blocks).
//
// tandem's block hashes are chained (block_hash.h: a block's hash covers its parent's hash), so a
// node is identified by its hash alone and the child of a node for the prompt's next block is simply
// the node of the prompt's next hash. The tree is therefore stored flat, in two arrays:
//   nodes: [hash, worker bitset (one uint64 per 64 workers)] in the order they were first stored,
//          so that the blocks of one stored event (a chain) lie next to each other;
//   table: open addressing (linear probing, backward-shift deletion, no tombstones) from block hash
//          to its node's index.
// Walking a prompt first tries the node after the previous one (the next block of the same stored
// chain: sequential memory, no hash probe) and probes the table only where that node holds another
// hash (a chain stored by another event); the table probes of the next blocks are prefetched. A
// removed node leaves a hole (hash 0) until the holes outnumber the live nodes, then the nodes are
// compacted in order. No allocation per lookup. Both arrays use 2 MiB pages where the kernel
// allows (huge_page_allocator.h). A block a worker holds without its parent is indexed but
// unreachable for that worker's overlap, exactly as the engine's own prefix lookup
// (KVCacheManager::FindCachedPrefix) stops at the first missing block.
//
// Workers are small integers in [0, max_workers) (KvRouter maps ids to them). Costs: Store/Remove
// O(1) expected (amortized: growth and compaction rebuild); RemoveWorker O(table size) (a rebuild:
// rare, e.g. ~10 ms at 1M blocks);
// FindMatches O(prompt blocks matched x the words of bitset holding a worker that can match;
// one word, e.g. <= 64 workers, keeps it in a register). Not thread-safe (KvRouter locks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "router/huge_page_allocator.h"

namespace tandem::router {

class KvIndex {
 public:
  static constexpr int kMaxWorkers = 1024;

  // Room for `max_workers` workers (1..kMaxWorkers) and about `expected_blocks` distinct blocks
  // before the table grows (it doubles past a load factor of 0.7).
  explicit KvIndex(int max_workers = 64, size_t expected_blocks = 1 << 16);

  int max_workers() const { return num_words_ * 64; }
  // Widens the worker bitsets (a rebuild) so that workers [0, max_workers) fit. Never narrows.
  void ReserveWorkers(int max_workers);

  // `worker` has `block_hash` cached / no longer cached. Idempotent.
  void Store(int worker, uint64_t block_hash);
  void Remove(int worker, uint64_t block_hash);
  // Forgets every block of `worker` (a rebuild of the table when it had any).
  void RemoveWorker(int worker);

  // overlap[w] = the number of leading hashes of `block_hashes` that worker w has cached, for
  // every w in [0, overlap.size()) (overlap.size() <= max_workers()). No allocation.
  void FindMatches(std::span<const uint64_t> block_hashes, std::span<int> overlap) const;

  bool Contains(int worker, uint64_t block_hash) const;
  size_t num_blocks() const { return num_nodes_; }  // distinct hashes cached by some worker
  size_t num_blocks(int worker) const;               // hashes cached by `worker`
  size_t capacity() const { return mask_ + 1; }      // table slots
  size_t memory_bytes() const {  // of the table and of the nodes in use (holes included)
    return (table_.size() + nodes_.size()) * sizeof(uint64_t);
  }

 private:
  // A table slot is 2 uint64: the key (0 = empty) and its node's index. A node is num_words_ + 1
  // uint64: the key (0 = a hole) then the worker bitset.
  size_t stride() const { return static_cast<size_t>(num_words_) + 1; }
  static uint64_t Key(uint64_t block_hash);  // never 0
  size_t Home(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  // The table slot holding `key`, or the empty slot where it would go.
  size_t Probe(uint64_t key) const;
  uint64_t* Node(size_t index) { return nodes_.data() + index * stride(); }
  const uint64_t* Node(size_t index) const { return nodes_.data() + index * stride(); }
  // FindMatches when only `word` of the bitset has workers that can match (active != 0: them).
  void FindMatches1(std::span<const uint64_t> block_hashes, std::span<int> overlap, int word,
                    uint64_t active) const;
  void EraseSlot(size_t slot);
  void Compact();  // drops the holes, keeping the nodes' order
  // Table of `capacity` slots and bitsets of `num_words`; drops nodes no worker holds and the
  // holes, keeping the nodes' order.
  void Rebuild(size_t capacity, int num_words);

  using Buffer = std::vector<uint64_t, HugePageAllocator<uint64_t>>;
  int num_words_ = 1;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t num_nodes_ = 0;  // live nodes
  size_t num_holes_ = 0;  // removed nodes not compacted yet
  Buffer table_;          // 2 * capacity()
  Buffer nodes_;          // stride() * (num_nodes_ + num_holes_)
  std::vector<size_t> worker_blocks_;  // per worker
  std::vector<uint64_t> present_;      // bitset: workers with at least one block
};

}  // namespace tandem::router
