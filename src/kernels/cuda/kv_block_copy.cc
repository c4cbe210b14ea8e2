#include "kernels/cuda/kv_block_copy.h"

#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace tandem::cuda {
namespace {

bool Aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Host memory the device can address (page-locked and mapped, or managed).
bool DeviceAccessible(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return (a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeManaged) && a.devicePointer == p;
}

}  // namespace

bool KvBlockCopySupported(std::span<void* const> layer_base, size_t block_bytes,
                          std::span<const KvBlockCopyEntry> entries) {
  if (layer_base.empty() || layer_base.size() > kKvCopyMaxLayers || block_bytes % 16 != 0) return false;
  for (void* b : layer_base) {
    if (b == nullptr || !Aligned(b)) return false;
  }
  const void* last_checked = nullptr;
  for (const KvBlockCopyEntry& e : entries) {
    if (e.host == nullptr || !Aligned(e.host)) return false;
    // One allocation holds every slot of a tier: checking the first entry's pointer keeps this
    // cheap.
    if (last_checked == nullptr && !DeviceAccessible(e.host)) return false;
    last_checked = e.host;
  }
  return true;
}

Status KvBlockCopy(std::span<void* const> layer_base, size_t block_bytes,
                   std::span<const KvBlockCopyEntry> entries, cudaStream_t stream, int max_ctas) {
  if (!KvBlockCopySupported(layer_base, block_bytes, entries)) {
    return Err(StatusCode::kInvalidArgument,
               "KvBlockCopy: {} layers (at most {}), block bytes {} (a multiple of 16), or a host "
               "address the device cannot reach or not 16-byte aligned",
               layer_base.size(), kKvCopyMaxLayers, block_bytes);
  }
  detail::KvCopyLaunch p;
  for (size_t l = 0; l < layer_base.size(); ++l) p.layer_base[l] = layer_base[l];
  p.num_layers = static_cast<int>(layer_base.size());
  p.block_bytes = block_bytes;
  p.max_ctas = max_ctas;
  auto flush = [&]() -> Status {
    if (p.num_entries > 0) TANDEM_CUDA_RETURN_IF_ERROR(detail::LaunchKvBlockCopy(p, stream));
    p.num_entries = 0;
    return Status::Ok();
  };
  for (const KvBlockCopyEntry& e : entries) {
    if (e.block_id < 0) return Err(StatusCode::kInvalidArgument, "KvBlockCopy: block id {}", e.block_id);
    if (p.num_entries == kKvCopyEntriesPerLaunch || (p.num_entries > 0 && p.to_host != (e.to_host ? 1 : 0))) {
      TANDEM_RETURN_IF_ERROR(flush());
    }
    p.to_host = e.to_host ? 1 : 0;
    p.host[p.num_entries] = e.host;
    p.block_id[p.num_entries] = e.block_id;
    ++p.num_entries;
  }
  return flush();
}

Status KvBlockCopyBatched(std::span<void* const> layer_base, size_t block_bytes,
                          std::span<const KvBlockCopyEntry> entries, cudaStream_t stream) {
  if (layer_base.empty() || stream == nullptr) {
    return Err(StatusCode::kInvalidArgument, "KvBlockCopyBatched: {} layers, stream {}", layer_base.size(),
               stream == nullptr ? "the legacy default" : "set");
  }
  int device = 0;
  TANDEM_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  bool to_host = true;
  auto flush = [&]() -> Status {
    if (dsts.empty()) return Status::Ok();
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    cudaMemLocation host{}, dev{};
    host.type = cudaMemLocationTypeHost;
    dev.type = cudaMemLocationTypeDevice;
    dev.id = device;
    attr.srcLocHint = to_host ? dev : host;
    attr.dstLocHint = to_host ? host : dev;
    size_t attr_index = 0;
    const cudaError_t e =
        cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attr, &attr_index, 1, stream);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();  // not left for the caller's next launch check
      return Err(StatusCode::kInternal, "cudaMemcpyBatchAsync of {} pieces: {}", dsts.size(), cudaGetErrorString(e));
    }
    dsts.clear();
    srcs.clear();
    sizes.clear();
    return Status::Ok();
  };
  for (void* b : layer_base) {
    if (b == nullptr) return Err(StatusCode::kInvalidArgument, "KvBlockCopyBatched: a null layer base");
  }
  for (const KvBlockCopyEntry& e : entries) {  // all checked before any batch is enqueued
    if (e.block_id < 0 || e.host == nullptr) {
      return Err(StatusCode::kInvalidArgument, "KvBlockCopyBatched: block id {}, host {}", e.block_id, e.host);
    }
  }
  for (const KvBlockCopyEntry& e : entries) {
    if (!dsts.empty() && to_host != e.to_host) TANDEM_RETURN_IF_ERROR(flush());
    to_host = e.to_host;
    for (size_t l = 0; l < layer_base.size(); ++l) {
      char* pool = static_cast<char*>(layer_base[l]) + static_cast<size_t>(e.block_id) * block_bytes;
      char* host = static_cast<char*>(e.host) + l * block_bytes;
      dsts.push_back(to_host ? host : pool);
      srcs.push_back(to_host ? pool : host);
      sizes.push_back(block_bytes);
    }
  }
  return flush();
}

}  // namespace tandem::cuda
