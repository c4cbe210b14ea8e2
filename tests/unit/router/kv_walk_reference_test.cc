// KvIndex::FindMatches and KvRouter's kv decision (temperature 0) against straightforward
// references: overlap = the leading prompt hashes in a per-worker set; the decision = the least
// (cost, decode blocks) over the routable workers in id order, the j-th of the k tied ones for one
// uniform draw j of the same generator (seeded alike). Covers the walk's paths: one word of bitset
// at an offset (only workers 64.. hold blocks, or a slot past 64 was freed), several words, chains
// stored in one run (sequential nodes) and block by block interleaved with other chains (every
// block a jump), prompts with uncached tails; and the decision's integral (exact int64) and
// fractional weights with loads that tie often.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/kv_events.h"
#include "router/kv_index.h"
#include "router/kv_router.h"

namespace tandem::router {
namespace {

int ReferenceOverlap(const std::set<uint64_t>& cached, std::span<const uint64_t> hashes) {
  int n = 0;
  while (n < static_cast<int>(hashes.size()) && cached.count(hashes[n])) ++n;
  return n;
}

// Random chains; where `interleave`, their blocks are first stored one at a time, round-robin
// over the chains (the nodes of one chain far apart), else chain after chain.
struct Fixture {
  std::vector<std::vector<uint64_t>> chains;
  std::vector<std::set<uint64_t>> ref;
  KvIndex index;

  Fixture(int max_workers, int num_chains, int chain_len, std::mt19937_64& rng)
      : ref(static_cast<size_t>(max_workers)), index(2, /*expected_blocks=*/1) {
    for (int c = 0; c < num_chains; ++c) {
      std::vector<uint64_t> chain;
      // A few chains share a prefix with chain 0 (a system prompt): they diverge at a jump.
      if (c > 0 && c % 4 == 0) chain.assign(chains[0].begin(), chains[0].begin() + chain_len / 3);
      while (static_cast<int>(chain.size()) < chain_len) chain.push_back(rng() | 1);
      chains.push_back(std::move(chain));
    }
  }
  void Store(int w, uint64_t h) {
    index.Store(w, h);
    ref[w].insert(h);
  }
  void Remove(int w, uint64_t h) {
    index.Remove(w, h);
    ref[w].erase(h);
  }
  // Every chain's prompt and variants: cut short, with an uncached tail, the tail of another.
  void ExpectMatches(std::mt19937_64& rng, size_t width, const char* what) {
    std::vector<int> overlap(width);
    for (const auto& chain : chains) {
      std::vector<std::vector<uint64_t>> prompts = {chain};
      prompts.emplace_back(chain.begin(), chain.begin() + static_cast<long>(rng() % chain.size()));
      std::vector<uint64_t> tail = chain;
      for (int i = 0; i < 20; ++i) tail.push_back(rng() | 1);
      prompts.push_back(std::move(tail));
      std::vector<uint64_t> spliced(chain.begin(), chain.begin() + static_cast<long>(chain.size() / 2));
      const auto& other = chains[rng() % chains.size()];
      spliced.insert(spliced.end(), other.begin() + static_cast<long>(other.size() / 2), other.end());
      prompts.push_back(std::move(spliced));
      for (const auto& p : prompts) {
        std::fill(overlap.begin(), overlap.end(), -1);
        index.FindMatches(p, overlap);
        for (size_t w = 0; w < width; ++w) {
          ASSERT_EQ(overlap[w], ReferenceOverlap(ref[w], p)) << what << " worker " << w;
        }
      }
    }
  }
};

void RunRandomEvents(int max_workers, std::vector<int> workers, bool interleave, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Fixture f(max_workers, 24, 90, rng);
  f.index.ReserveWorkers(max_workers);
  // Initial stores: whole chains on a few workers each, in one run or block by block.
  std::vector<std::pair<int, int>> holders;  // (chain, worker)
  for (int c = 0; c < static_cast<int>(f.chains.size()); ++c) {
    for (int k = 0; k < 3; ++k) holders.emplace_back(c, workers[rng() % workers.size()]);
  }
  if (interleave) {
    for (int i = 0; i < 90; ++i) {
      for (auto [c, w] : holders) f.Store(w, f.chains[c][i]);
    }
  } else {
    for (auto [c, w] : holders) {
      for (uint64_t h : f.chains[c]) f.Store(w, h);
    }
  }
  f.ExpectMatches(rng, static_cast<size_t>(max_workers), "after the stores");
  for (int step = 0; step < 3000; ++step) {
    const int w = workers[rng() % workers.size()];
    const auto& chain = f.chains[rng() % f.chains.size()];
    const int op = static_cast<int>(rng() % 100);
    if (op < 45) {  // a run of the chain, from its start
      const size_t len = rng() % chain.size();
      for (size_t i = 0; i < len; ++i) f.Store(w, chain[i]);
    } else if (op < 99) {  // an eviction in the middle: the prefix ends there
      f.Remove(w, chain[rng() % chain.size()]);
    } else {
      f.index.RemoveWorker(w);
      f.ref[w].clear();
    }
    if (step % 250 == 0) {
      for (size_t width : {static_cast<size_t>(max_workers), static_cast<size_t>(workers.back()) + 1}) {
        f.ExpectMatches(rng, width, "random events");
      }
    }
  }
}

TEST(KvWalkReferenceTest, OneWordAtOffsetOne) {  // workers 64..127 of 128
  std::vector<int> workers;
  for (int w = 64; w < 128; ++w) workers.push_back(w);
  RunRandomEvents(128, workers, /*interleave=*/false, 1);
  RunRandomEvents(128, workers, /*interleave=*/true, 2);
}

TEST(KvWalkReferenceTest, OneWordOfTwoAfterAFreedSlot) {  // 64 workers, slot 64 once used
  std::vector<int> workers;
  for (int w = 0; w < 64; ++w) workers.push_back(w);
  RunRandomEvents(65, workers, /*interleave=*/false, 3);
  RunRandomEvents(65, workers, /*interleave=*/true, 4);
}

TEST(KvWalkReferenceTest, SeveralWords) {  // workers spread over three words
  const std::vector<int> workers = {0, 5, 63, 64, 100, 129, 150};
  RunRandomEvents(160, workers, /*interleave=*/false, 5);
  RunRandomEvents(160, workers, /*interleave=*/true, 6);
}

TEST(KvWalkReferenceTest, SlotPastTheOthersFreedLeavesOneWord) {
  std::mt19937_64 rng(9);
  Fixture f(65, 8, 40, rng);
  for (int w = 0; w < 64; ++w) {
    for (uint64_t h : f.chains[w % 8]) f.Store(w, h);
  }
  for (uint64_t h : f.chains[0]) f.Store(64, h);
  f.ExpectMatches(rng, 65, "two words");
  f.index.RemoveWorker(64);
  f.ref[64].clear();
  f.ExpectMatches(rng, 65, "one word of two");
  f.ExpectMatches(rng, 64, "one word of two, 64 wide");
}

// ---- the decision ----

struct Expected {
  std::string worker_id;
  double cost = 0;
  int prefill = 0, decode = 0, overlap = 0;
};

// The decision as DESIGN.md states it, from the router's own view of overlaps and load.
Expected ReferenceDecision(KvRouter& router, std::span<const uint64_t> hashes, double weight,
                           std::mt19937_64& rng) {
  const auto overlaps = router.Overlaps(hashes);  // by worker id, sorted
  const auto workers = router.Workers();          // sorted by worker id
  std::vector<Expected> candidates;
  for (size_t i = 0; i < workers.size(); ++i) {
    if (!workers[i].routable) continue;
    Expected e;
    e.worker_id = workers[i].worker_id;
    e.overlap = overlaps[i].second;
    e.prefill = static_cast<int>(hashes.size()) - e.overlap +
                static_cast<int>(workers[i].predicted_prefill_blocks);
    e.decode = workers[i].load.num_active_blocks + static_cast<int>(workers[i].predicted_decode_blocks);
    e.cost = weight * e.prefill + e.decode;
    candidates.push_back(e);
  }
  const Expected* best = &candidates[0];
  for (const Expected& e : candidates) {
    if (e.cost < best->cost || (e.cost == best->cost && e.decode < best->decode)) best = &e;
  }
  std::vector<const Expected*> tied;
  for (const Expected& e : candidates) {
    if (e.cost == best->cost && e.decode == best->decode) tied.push_back(&e);
  }
  if (tied.size() == 1) return *tied[0];
  const int j = std::uniform_int_distribution<int>(0, static_cast<int>(tied.size()) - 1)(rng);
  return *tied[j];
}

void RunDecisions(double weight, uint64_t seed) {
  constexpr uint64_t kRouterSeed = 777;
  KvRouterConfig config;
  config.mode = RouterMode::kKv;
  config.overlap_weight = weight;
  config.seed = kRouterSeed;
  KvRouter router(config);
  std::mt19937_64 reference_rng(kRouterSeed);  // draws only on ties, as the router's
  std::mt19937_64 rng(seed);
  constexpr int kWorkers = 40;
  std::vector<std::string> ids;
  for (int w = 0; w < kWorkers; ++w) {
    ids.push_back("w" + std::to_string(100 + (w * 17) % kWorkers));  // added out of id order
    ASSERT_TRUE(router.AddWorker(ids.back()).ok());
  }
  std::vector<std::vector<uint64_t>> chains;
  for (int c = 0; c < 12; ++c) {
    std::vector<uint64_t> chain;
    for (int i = 0; i < 30; ++i) chain.push_back(rng() | 1);
    chains.push_back(chain);
  }
  std::vector<uint64_t> next_event(kWorkers, 1);
  std::vector<std::string> routed;
  RoutingDecision d;
  for (int step = 0; step < 4000; ++step) {
    const int w = static_cast<int>(rng() % kWorkers);
    const int op = static_cast<int>(rng() % 100);
    if (op < 20) {
      const auto& chain = chains[rng() % chains.size()];
      const size_t len = rng() % chain.size();
      KvEvent e{next_event[w]++, KvStoredEvent{0, {chain.begin(), chain.begin() + static_cast<long>(len)}}};
      ASSERT_TRUE(router.ApplyEvents(ids[w], std::span<const KvEvent>(&e, 1)).ok());
    } else if (op < 30) {
      KvLoad load;
      load.num_active_blocks = static_cast<int>(rng() % 4);  // small: ties are frequent
      ASSERT_TRUE(router.UpdateLoad(ids[w], load).ok());
    } else if (op < 33) {
      ASSERT_TRUE(router.SetRoutable(ids[w], rng() % 4 != 0).ok());
    } else if (op < 38 && !routed.empty()) {
      const size_t k = rng() % routed.size();
      if (rng() % 2) {
        router.MarkPrefillDone(routed[k]);
      } else {
        router.Free(routed[k]);
        routed.erase(routed.begin() + static_cast<long>(k));
      }
    } else {
      std::vector<uint64_t> prompt = chains[rng() % chains.size()];
      prompt.resize(rng() % prompt.size());
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) prompt.push_back(rng() | 1);
      bool any_routable = false;
      for (const auto& s : router.Workers()) any_routable |= s.routable;
      if (!any_routable) continue;
      const Expected want = ReferenceDecision(router, prompt, weight, reference_rng);
      std::string request_id;
      if (rng() % 3 == 0) request_id = "r" + std::to_string(step);
      ASSERT_TRUE(router.Route(prompt, &d, request_id).ok());
      if (!request_id.empty()) routed.push_back(request_id);
      ASSERT_EQ(d.worker_id, want.worker_id) << "step " << step;
      ASSERT_EQ(d.overlap_blocks, want.overlap) << "step " << step;
      ASSERT_EQ(d.prefill_blocks, want.prefill) << "step " << step;
      ASSERT_EQ(d.decode_blocks, want.decode) << "step " << step;
      ASSERT_EQ(d.cost, want.cost) << "step " << step;
    }
  }
}

TEST(KvDecisionReferenceTest, IntegralWeights) {
  RunDecisions(1.0, 11);
  RunDecisions(3.0, 12);
  RunDecisions(0.0, 13);  // load only: many ties
}

TEST(KvDecisionReferenceTest, FractionalWeights) {
  RunDecisions(0.5, 14);
  RunDecisions(1.25, 15);
  RunDecisions(0.1, 16);  // costs rounded as doubles: ties compared on the rounded values
}

}  // namespace
}  // namespace tandem::router
