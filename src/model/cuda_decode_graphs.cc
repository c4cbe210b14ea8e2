// Pinned staging and decode graphs of the CUDA runner (cuda_decode_graphs.h).
#ifdef TANDEM_HAVE_CUDA

#include "model/cuda_decode_graphs.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "kernels/cuda/cuda_check.h"

namespace tandem {

PinnedBuffer::~PinnedBuffer() {
  if (p_ != nullptr) cudaFreeHost(p_);
}

Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= bytes_) return Status::Ok();
  if (p_ != nullptr) cudaFreeHost(p_);
  p_ = nullptr;
  bytes_ = 0;
  const size_t rounded = (bytes + 4095) / 4096 * 4096;
  void* p = nullptr;
  const cudaError_t err = cudaMallocHost(&p, rounded);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Err(StatusCode::kResourceExhausted, "cudaMallocHost of {} bytes: {}", rounded,
               cudaGetErrorString(err));
  }
  p_ = p;
  bytes_ = rounded;
  return Status::Ok();
}

int DecodeBatchBucket(int n) {
  if (n <= 0 || n > kMaxDecodeGraphBatch) return 0;
  if (n <= 8) {
    int b = 1;
    while (b < n) b *= 2;
    return b;
  }
  const int step = n <= 64 ? 8 : n <= 128 ? 16 : 32;
  return (n + step - 1) / step * step;
}

int DecodeStrideBucket(int blocks, int max_blocks) {
  if (blocks > max_blocks) return 0;
  int b = 16;
  while (b < blocks) b *= 2;
  return b < max_blocks ? b : max_blocks;
}

int CountDecodeGraphKeys(int max_num_seqs, int max_model_len, int block_size, int max_blocks) {
  if (max_num_seqs <= 0 || max_model_len <= 0 || block_size <= 0) return 0;
  std::set<int> batches, strides;
  for (int n = 1; n <= std::min(max_num_seqs, kMaxDecodeGraphBatch); ++n) {
    batches.insert(DecodeBatchBucket(n));
  }
  const int blocks = (max_model_len + block_size - 1) / block_size;
  for (int b = 1; b <= blocks; ++b) {
    const int s = DecodeStrideBucket(b, max_blocks);
    if (s > 0) strides.insert(s);
  }
  return static_cast<int>(batches.size() * strides.size());
}

DecodeGraphMode DecodeGraphModeFromEnv() {
  const char* v = std::getenv("TANDEM_CUDA_GRAPHS");
  if (v == nullptr) return DecodeGraphMode::kOn;
  if (std::strcmp(v, "0") == 0) return DecodeGraphMode::kOff;
  if (std::strcmp(v, "pad") == 0) return DecodeGraphMode::kPadOnly;
  return DecodeGraphMode::kOn;
}

void DecodeGraphCache::Clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

Status DecodeGraphCache::Run(std::pair<int, int> key, uint64_t generation, cudaStream_t stream,
                             const std::function<Status()>& body) {
  if (mode_ != DecodeGraphMode::kOn) return body();
  if (generation != generation_) {
    Clear();
    generation_ = generation;
  }
  if (auto it = graphs_.find(key); it != graphs_.end()) {
    ++replays_;
    TANDEM_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream));
    return Status::Ok();
  }
  TANDEM_RETURN_IF_ERROR(body());
  // Capture for the next steps with this key (capturing enqueues nothing).
  auto give_up = [this](const char* what, const std::string& why) {
    cudaGetLastError();
    std::fprintf(stderr, "tandem: CUDA graphs off for this runner (%s: %s); decode steps run "
                 "eagerly\n", what, why.c_str());
    Clear();
    mode_ = DecodeGraphMode::kPadOnly;
    return Status::Ok();
  };
  size_t free_before = 0, free_after = 0, total = 0;
  const bool measured = cudaMemGetInfo(&free_before, &total) == cudaSuccess;
  cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) return give_up("cudaStreamBeginCapture", cudaGetErrorString(err));
  const Status captured = body();
  cudaGraph_t graph = nullptr;
  err = cudaStreamEndCapture(stream, &graph);
  if (!captured.ok() || err != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    return give_up("capture", captured.ok() ? std::string(cudaGetErrorString(err))
                                            : captured.ToString());
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) return give_up("cudaGraphInstantiate", cudaGetErrorString(err));
  graphs_.emplace(key, exec);
  if (measured && cudaMemGetInfo(&free_after, &total) == cudaSuccess && free_after < free_before) {
    max_graph_bytes_ = std::max(max_graph_bytes_, free_before - free_after);
  }
  cudaGetLastError();
  return Status::Ok();
}

}  // namespace tandem

#endif  // TANDEM_HAVE_CUDA
