#include "engine/kv_cache_sizing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/logging.h"
#include "model/device_memory_plan.h"

namespace tandem {
namespace {

constexpr int kProfileLogprobs = 20;  // the most a request may ask for (engine.cc)

double GiB(double bytes) { return bytes / static_cast<double>(1ull << 30); }

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

// One step of `lens[i]` tokens per sequence ending at `ends[i]` (exclusive), every block id 0.
Status ProfileStep(ModelRunner& runner, const EngineConfig& c, const std::vector<int>& lens,
                   const std::vector<int>& ends, SequenceSlice::Logits logits) {
  int max_len = 0, max_end = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    max_len = std::max(max_len, lens[i]);
    max_end = std::max(max_end, ends[i]);
  }
  const std::vector<int32_t> tokens(max_len, 0);
  const std::vector<int32_t> table(CeilDiv(max_end, c.block_size), 0);
  ForwardBatch batch;
  for (size_t i = 0; i < lens.size(); ++i) {
    SequenceSlice s;
    s.token_ids = std::span<const int32_t>(tokens).first(lens[i]);
    s.start_pos = ends[i] - lens[i];
    s.block_table = std::span<const int32_t>(table).first(CeilDiv(ends[i], c.block_size));
    s.logits = logits;
    s.num_logprobs = logits == SequenceSlice::Logits::kArgmax ? kProfileLogprobs : -1;
    batch.seqs.push_back(s);
  }
  ForwardOutput out;
  return runner.Execute(batch, &out);
}

// The largest steps the scheduler can build, on a 1-block pool (module comment).
Status ProfileRun(ModelRunner& runner, const EngineConfig& c) {
  TANDEM_RETURN_IF_ERROR(runner.AllocateKVCache(1, c.block_size));
  const int total = c.max_num_batched_tokens;
  int n = std::max(std::min(c.max_num_seqs, total), CeilDiv(total, c.max_model_len));
  std::vector<int> lens(n, total / n), ends;
  for (int i = 0; i < total % n; ++i) ++lens[i];
  ends = lens;  // prefill from position 0
  TANDEM_RETURN_IF_ERROR(ProfileStep(runner, c, lens, ends, SequenceSlice::Logits::kLast));
  n = c.max_num_seqs;
  TANDEM_RETURN_IF_ERROR(ProfileStep(runner, c, std::vector<int>(n, 1),
                                     std::vector<int>(n, c.max_model_len),
                                     SequenceSlice::Logits::kArgmax));
  return Status::Ok();
}

}  // namespace

Result<int> ComputeNumKVBlocks(ModelRunner& runner, const EngineConfig& c) {
  if (c.num_kv_blocks > 0) return c.num_kv_blocks;
  const size_t block_bytes = runner.KVBlockBytes(c.block_size);
  if (block_bytes == 0) return Status(StatusCode::kInternal, "the runner reports 0-byte KV blocks");
  auto blocks_of = [&](size_t bytes) -> Result<int> {
    const size_t n = bytes / block_bytes;
    if (n < 1) {
      return Err(StatusCode::kResourceExhausted,
                 "kv_cache_bytes {} cannot hold one KV block of {} bytes ({} tokens)", bytes,
                 block_bytes, c.block_size);
    }
    return static_cast<int>(std::min<size_t>(n, 1u << 30));
  };
  if (c.kv_cache_bytes > 0) return blocks_of(c.kv_cache_bytes);
  Result<DeviceMemoryInfo> before = runner.GetDeviceMemoryInfo();
  if (!before.ok()) {
    if (before.status().code() != StatusCode::kUnimplemented) return before.status();
    // A host runner: the default pool, but never more than max_num_seqs sequences of max_model_len
    // (`tandem generate`, one sequence, needs a few MB of the tiny model's KV, not 256 MiB).
    TANDEM_ASSIGN_OR_RETURN(const int by_bytes, blocks_of(kDefaultHostKVCacheBytes));
    const int64_t by_seqs = static_cast<int64_t>(std::max(c.max_num_seqs, 1)) * CeilDiv(c.max_model_len, c.block_size);
    return static_cast<int>(std::min<int64_t>(by_bytes, by_seqs));
  }
  TANDEM_RETURN_IF_ERROR(CheckGpuMemoryUtilization(c.gpu_memory_utilization));
  TANDEM_RETURN_IF_ERROR(ProfileRun(runner, c));
  TANDEM_ASSIGN_OR_RETURN(DeviceMemoryInfo mem, runner.GetDeviceMemoryInfo());
  const double total = static_cast<double>(mem.total_bytes);
  const double used = static_cast<double>(mem.used_bytes);
  const double free = static_cast<double>(mem.free_bytes);
  const double pending =
      static_cast<double>(runner.PendingDeviceBytes(c.max_num_seqs, c.max_model_len));
  const double budget = std::min(c.gpu_memory_utilization * total - used, free) -
                        static_cast<double>(kDeviceMemoryMarginBytes) - pending;
  const int blocks_per_request = CeilDiv(c.max_model_len, c.block_size);
  const double request_bytes = static_cast<double>(blocks_per_request) * block_bytes;
  const std::string where = fmt::format(
      "gpu_memory_utilization {} of {:.2f} GiB = {:.2f} GiB; this worker holds {:.2f} GiB after "
      "loading the weights ({:.2f} GiB) and a profile step of {} tokens; {:.2f} GiB held back "
      "for decode graphs and sampler buffers still to come; {:.2f} GiB free on the device; "
      "{:.2f} GiB margin",
      c.gpu_memory_utilization, GiB(total), GiB(c.gpu_memory_utilization * total), GiB(used),
      GiB(static_cast<double>(mem.weights_bytes)), c.max_num_batched_tokens, GiB(pending),
      GiB(free), GiB(static_cast<double>(kDeviceMemoryMarginBytes)));
  if (budget < request_bytes) {
    if (budget < static_cast<double>(block_bytes)) {
      return Err(StatusCode::kResourceExhausted,
                 "no device memory is left for the KV cache ({}): raise --gpu-memory-utilization "
                 "(or free the device)",
                 where);
    }
    const int fit = static_cast<int>(budget / static_cast<double>(block_bytes)) * c.block_size;
    return Err(StatusCode::kResourceExhausted,
               "one request of max_model_len {} tokens needs {:.2f} GiB of KV cache, more than the "
               "{:.2f} GiB left for it on the device ({}); the largest max_model_len that fits is "
               "{}: raise --gpu-memory-utilization or lower --max-model-len",
               c.max_model_len, GiB(request_bytes), GiB(budget), where, fit);
  }
  const size_t n = static_cast<size_t>(budget / static_cast<double>(block_bytes));
  const int num_blocks = static_cast<int>(std::min<size_t>(n, 1u << 30));
  log::info("KV cache from device memory: weights {:.2f} GiB, KV {:.2f} GiB, {} blocks of {} "
            "tokens ({} tokens), max concurrency {:.2f}x at max_model_len {} ({})",
            GiB(static_cast<double>(mem.weights_bytes)),
            GiB(static_cast<double>(num_blocks) * block_bytes), num_blocks, c.block_size,
            static_cast<int64_t>(num_blocks) * c.block_size,
            static_cast<double>(num_blocks) / blocks_per_request, c.max_model_len, where);
  return num_blocks;
}

}  // namespace tandem
