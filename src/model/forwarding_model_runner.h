// ForwardingModelRunner: a ModelRunner that hands every call to an inner runner, the base of a
// decorator that changes one or two of them (a runner that slows its layers, one that reports
// sampling on its device, in the tests). Execute forwards too; a decorator that wants the base
// ModelRunner::Execute (Forward, then the picks on the host) calls it itself.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "model/model_runner.h"

namespace tandem {

class ForwardingModelRunner : public ModelRunner {
 public:
  explicit ForwardingModelRunner(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  Status AllocateKVCache(int num_blocks, int block_size) override {
    return inner_->AllocateKVCache(num_blocks, block_size);
  }
  size_t KVBlockBytes(int block_size) const override { return inner_->KVBlockBytes(block_size); }
  KVCacheLayout kv_cache_layout() override { return inner_->kv_cache_layout(); }
  std::string kv_cache_dtype() const override { return inner_->kv_cache_dtype(); }
  Status Forward(const ForwardBatch& batch, std::vector<float>* logits) override {
    return inner_->Forward(batch, logits);
  }
  Status Execute(const ForwardBatch& batch, ForwardOutput* out) override {
    return inner_->Execute(batch, out);
  }
  bool SamplesOnDevice() const override { return inner_->SamplesOnDevice(); }
  Result<DeviceMemoryInfo> GetDeviceMemoryInfo() override { return inner_->GetDeviceMemoryInfo(); }
  size_t PendingDeviceBytes(int max_num_seqs, int max_model_len) const override {
    return inner_->PendingDeviceBytes(max_num_seqs, max_model_len);
  }
  Status CopyKvBlocks(std::span<const KvBlockCopy> copies) override { return inner_->CopyKvBlocks(copies); }
  Status SyncKvCopies() override { return inner_->SyncKvCopies(); }
  bool AsyncKvOnboard() const override { return inner_->AsyncKvOnboard(); }
  Status StartKvOnboard(std::span<const KvBlockCopy> copies, uint64_t* ticket) override {
    return inner_->StartKvOnboard(copies, ticket);
  }
  Status PollKvOnboard(uint64_t ticket, bool wait, bool* landed, double* seconds) override {
    return inner_->PollKvOnboard(ticket, wait, landed, seconds);
  }
  bool LayerwiseKvCopies() const override { return inner_->LayerwiseKvCopies(); }
  Status StartKvCopiesByLayer(std::span<const KvBlockCopy> copies) override {
    return inner_->StartKvCopiesByLayer(copies);
  }
  KvCopySeconds TakeKvLayerCopySeconds() override { return inner_->TakeKvLayerCopySeconds(); }
  void* AllocateHostStaging(size_t bytes) override { return inner_->AllocateHostStaging(bytes); }
  void FreeHostStaging(void* p) override { inner_->FreeHostStaging(p); }

 protected:
  ModelRunner& inner() { return *inner_; }

 private:
  std::unique_ptr<ModelRunner> inner_;
};

}  // namespace tandem
