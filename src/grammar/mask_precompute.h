// MaskPrecomputer: fills the node caches of token maskers (token_mask.h) on a background thread,
// so that the first visits to a grammar's nodes (a walk of the whole vocabulary each, ~1-2 ms
// for a string's nodes on the Qwen3 vocabulary) happen while the request's prefill and first
// decode steps run instead of inside a step: xgrammar computes the same cache when it compiles
// (arXiv:2411.15100 section 3.1). One thread, niced, maskers taken in the order they were added;
// a masker no one else holds any more is skipped. Fill stays correct throughout: a node not
// computed yet is computed by Fill itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "grammar/token_mask.h"

namespace tandem::grammar {

class MaskPrecomputer {
 public:
  MaskPrecomputer() = default;
  ~MaskPrecomputer();  // stops the current precompute at its next node, joins the thread
  MaskPrecomputer(const MaskPrecomputer&) = delete;
  MaskPrecomputer& operator=(const MaskPrecomputer&) = delete;

  // Queues `masker` (TokenMasker::Precompute with its default budget); starts the thread on the
  // first call. Thread-safe.
  void Add(std::shared_ptr<TokenMasker> masker);
  // Blocks until every masker added so far is done (tests, benchmarks).
  void Drain();

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::weak_ptr<TokenMasker>> queue_;
  bool busy_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tandem::grammar
