// Pieces of the CUDA runner's step (cuda_model_runner.cc) that do not need the model: pinned host
// staging buffers and the cache of CUDA graphs for decode steps. Built only with CUDA
// (TANDEM_HAVE_CUDA; target tandem_model_cuda).
//
// Decode graphs: a step whose slices all have one new token (kLast / kArgmax / kNone) is padded to
// a batch bucket (DecodeBatchBucket) with a block-table stride bucket (DecodeStrideBucket), and the
// whole forward pass for that (bucket, stride) is captured once into a CUDA graph and replayed
// afterwards (the step's inputs are uploaded into fixed device buffers first). The first step of a
// key runs eagerly (which also loads lazily loaded kernels and warms cuBLAS), the capture follows.
// TANDEM_CUDA_GRAPHS=0 turns graphs off (plain eager steps, no padding); TANDEM_CUDA_GRAPHS=pad
// keeps the padded step but never captures (to compare graph vs eager on the same shapes).
#pragma once

#ifdef TANDEM_HAVE_CUDA

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "common/status.h"

namespace tandem {

// A page-locked host allocation (cudaMallocHost) that grows and never shrinks; async copies from
// and to it overlap nothing else on the host. Errors: ResourceExhausted, Internal (CUDA).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();
  // Grows to at least `bytes` (the contents are not kept).
  Status Reserve(size_t bytes);
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Largest batch a decode graph serves; larger decode steps run eagerly.
constexpr int kMaxDecodeGraphBatch = 256;

// The padded batch of a decode step of `num_seqs` sequences: 1, 2, 4, 8, then multiples of 8 up to
// 64, of 16 up to 128, of 32 up to kMaxDecodeGraphBatch; 0 above that (no graph).
int DecodeBatchBucket(int num_seqs);
// The block-table row stride of a decode graph: the next power of two >= max(blocks, 16), at most
// max_blocks (the blocks of the longest possible sequence); 0 when blocks > max_blocks.
int DecodeStrideBucket(int blocks, int max_blocks);

// The distinct (batch bucket, stride bucket) keys of decode steps of 1..max_num_seqs sequences
// (at most kMaxDecodeGraphBatch: larger steps run eagerly) whose longest sequence holds
// 1..ceil(max_model_len / block_size) blocks, with max_blocks the model's longest sequence in
// blocks: the decode graphs a server can capture (one variant per key when every row is picked).
int CountDecodeGraphKeys(int max_num_seqs, int max_model_len, int block_size, int max_blocks);

enum class DecodeGraphMode { kOff, kPadOnly, kOn };
// From TANDEM_CUDA_GRAPHS: "0" kOff, "pad" kPadOnly, anything else (or unset) kOn.
DecodeGraphMode DecodeGraphModeFromEnv();

// Captured decode steps, keyed by (batch bucket, stride bucket). Not thread-safe (one per runner).
class DecodeGraphCache {
 public:
  explicit DecodeGraphCache(DecodeGraphMode mode) : mode_(mode) {}
  DecodeGraphCache(const DecodeGraphCache&) = delete;
  DecodeGraphCache& operator=(const DecodeGraphCache&) = delete;
  ~DecodeGraphCache() { Clear(); }

  DecodeGraphMode mode() const { return mode_; }
  // Padded decode steps (kPadOnly or kOn).
  bool padded() const { return mode_ != DecodeGraphMode::kOff; }

  // Runs `body` (which enqueues the step on `stream`) for `key`: replays its graph when one was
  // captured with the same `generation` (a counter the caller bumps whenever a device buffer the
  // body uses moves; older graphs are dropped), else runs body eagerly and then captures it for
  // the next time. A failed capture turns graphs off for this cache (one line on stderr) and the
  // eager result stands. Errors: those of body, Internal (a graph launch failed).
  Status Run(std::pair<int, int> key, uint64_t generation, cudaStream_t stream,
             const std::function<Status()>& body);
  void Clear();
  int num_graphs() const { return static_cast<int>(graphs_.size()); }
  int replays() const { return replays_; }
  // The device memory one capture took, measured as the drop in the device's free memory across
  // it (cudaMemGetInfo; the largest seen; 0 before the first capture).
  size_t max_graph_bytes() const { return max_graph_bytes_; }

 private:
  DecodeGraphMode mode_;
  uint64_t generation_ = 0;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;
  int replays_ = 0;
  size_t max_graph_bytes_ = 0;
};

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
