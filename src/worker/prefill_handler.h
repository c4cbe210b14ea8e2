// PrefillHandler: a prefill worker's side of Worker.RemotePrefill (rpc/remote_prefill.h).
//
//   1. checks the decode worker's KV geometry against this engine's (layers, bytes per block,
//      tokens per block, block table long enough) and learns its transfer agent (metadata bytes,
//      reloaded only when they change);
//   2. runs the prompt through the engine as a hold_blocks request with max_tokens = 1 (this
//      worker's prefix cache serves what it can; stop strings are dropped, every other sampling
//      parameter is kept, so the first token is the one an aggregated worker would sample);
//   3. on the transfer thread: WRITEs blocks [num_cached_tokens / block_size, ceil(len /
//      block_size)) of every layer into the decode worker's block table, bounded by the write
//      window, the last write with the notification (runtime::KvReadyNotification: the first token
//      and the call id, or the bare request id when logprobs were asked for); then frees the held
//      blocks and answers.
//      Layer-wise (when the engine reports per-layer readiness, RequestOptions::on_layer_kv_ready):
//      layer l's blocks are posted as soon as that layer's KV is in memory, while later layers
//      still compute (one Post per layer, runs of consecutive blocks coalesced); the last layer
//      is posted, with the notification, once the first token is sampled and every earlier
//      layer's write has landed, so the notification still means "all of it is there".
//      Otherwise (the engine did not report layers): one Post of every layer after the prefill,
//      descriptors layer-major.
// Each side's pool may be host or GPU memory: ours from our engine's layout, the decode worker's
// from its agent metadata (KVPoolMemoryOf); the agent picks a backend that moves both (tcp
// stages GPU memory through pinned host buffers).
// Cancel while computing aborts the engine request (answer: FailedPrecondition "cancelled"); once
// a write is posted it runs to its end (bounded by the window), and a failed request is answered
// only after every write it posted has ended, so that nothing lands in the decode worker's blocks
// after the answer (decode then prefills them locally). A write that fails while the prompt still
// computes (layer-wise: layer 0's write found the decode worker dead) cancels the engine request,
// and the answer waits for the engine's final output, so the blocks the engine holds for it once
// done are released too (issue 21: they were held for nobody). Blocks are always released.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "engine/async_engine.h"
#include "model/layer_kv_ready.h"
#include "rpc/remote_prefill.h"
#include "transfer/agent.h"

namespace tandem::worker {

struct PrefillHandlerOptions {
  // Post each layer's KV as soon as it is computed (layer-wise pipelining); false: one write after
  // the whole prefill (the baseline to compare against).
  bool layerwise = true;
};

class PrefillHandler final : public runtime::RemotePrefillHandler {
 public:
  // `engine` and `agent` must outlive this object; the agent must have the engine's KV pool
  // registered (RegisterKVCache).
  PrefillHandler(std::shared_ptr<AsyncEngine> engine, transfer::Agent* agent,
                 PrefillHandlerOptions options = {});

  // Layer writes posted while the prefill was still computing (the first token not yet sampled):
  // the part of the transfer hidden behind compute. Counts over the handler's lifetime.
  uint64_t num_layer_posts() const { return num_layer_posts_.load(); }
  uint64_t num_layer_posts_before_computed() const { return num_layer_posts_early_.load(); }
  ~PrefillHandler() override;  // waits for posted writes, answers what is left with an error

  void Prefill(runtime::RemotePrefillRequest request, runtime::RemotePrefillDone done) override;
  void Cancel(const std::string& request_id) override;

 private:
  struct Job;
  void OnEngineOutput(const std::shared_ptr<Job>& job, RequestOutput out);
  void OnLayerReady(const std::shared_ptr<Job>& job, const LayerKVReady& ready);  // engine thread
  void TransferLoop();
  // Transfer thread: posts what is ready; true when the job is finished (answered).
  bool StepWholeJob(const std::shared_ptr<Job>& job);
  bool StepLayerwiseJob(const std::shared_ptr<Job>& job);
  static std::string KvReadyNotificationOf(const Job& job);
  static runtime::RemotePrefillResult Written(const Job& job, int num_blocks, uint64_t bytes, double seconds);
  // The descriptors of layer `layer`'s blocks [first, end) of `blocks` into the decode worker's.
  void AddLayerDescs(const Job& job, size_t layer, const std::vector<int>& blocks, int first, int end,
                     transfer::DescList* local, transfer::DescList* remote) const;
  void Finish(const std::shared_ptr<Job>& job, Result<runtime::RemotePrefillResult> result);
  // A write of ours ended (a backend thread, through PostOptions::on_done): wake the transfer thread.
  void OnTransferEnded();
  transfer::PostOptions PostOptionsFor(const Job& job, std::chrono::steady_clock::time_point now) const;
  Status EnsurePeer(const runtime::KVTarget& target);

  std::shared_ptr<AsyncEngine> engine_;
  transfer::Agent* agent_;
  PrefillHandlerOptions options_;
  KVCacheLayout layout_;
  int block_size_;

  std::mutex peers_mu_;
  std::map<std::string, std::string> peer_metadata_;  // agent name -> metadata bytes loaded

  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopping_{false};  // written under mu_, read anywhere
  std::deque<std::shared_ptr<Job>> ready_;   // computed or with layers ready, to post
  std::set<std::string> outstanding_;         // request ids not yet answered
  std::atomic<uint64_t> num_layer_posts_{0}, num_layer_posts_early_{0};
  std::thread transfer_thread_;
  bool transfer_ended_flag_ = false;  // guarded by mu_
  // What on_done callbacks reach this handler through: owner is cleared once every write ended.
  struct TransferEndedSignal {
    std::mutex mu;
    PrefillHandler* owner = nullptr;
  };
  std::shared_ptr<TransferEndedSignal> transfer_ended_ = std::make_shared<TransferEndedSignal>();
};

// The DeviceCopier an agent needs for `layout`'s pool (AgentOptions::device_copier): null for a
// host pool; the CUDA copier for a pool on a GPU (device_id >= 0) when built with CUDA
// (TANDEM_HAVE_CUDA_COPIER), else null (and RegisterKVCache then refuses the pool, saying why).
std::shared_ptr<transfer::DeviceCopier> KVDeviceCopier(const KVCacheLayout& layout);

// Registers every layer's KV pool region of `layout` with `agent`: host memory when device_id < 0,
// else device memory of that GPU (tcp stages it through pinned host buffers; the agent needs
// KVDeviceCopier(layout)). Logs the start-up line KVTransferBackendLine. Errors: the agent's
// (FailedPrecondition: no backend moves that memory), or, for a GPU pool, that no backend (or not
// the override) reaches another process with it.
Result<std::vector<transfer::Registration>> RegisterKVCache(transfer::Agent& agent,
                                                           const KVCacheLayout& layout);

// "KV transfer backend: tcp (host staging for cuda:0)", "KV transfer backend: tcp (host memory)":
// what moves `layout`'s pool to and from other workers (Agent::DescribeBackend), for operators
// to grep (issue 7).
Result<std::string> KVTransferBackendLine(const transfer::Agent& agent, const KVCacheLayout& layout);

// The memory kind and device of the region that holds `layer0_base` in a peer's agent metadata
// (the decode worker's KV pool). Errors: DataLoss for bad metadata, InvalidArgument when no
// region holds the address.
Result<std::pair<transfer::MemoryKind, int32_t>> KVPoolMemoryOf(std::string_view agent_metadata,
                                                                  uint64_t layer0_base);

}  // namespace tandem::worker
