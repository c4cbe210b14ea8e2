// Zero-filled memory whose pages become resident only when first touched (an anonymous private
// mapping, MAP_NORESERVE): a pool sized for the worst case costs resident memory only for the part
// in use (the CPU runner's KV cache; issue 29). Most kernels map the shared zero page on a first
// read; some (this project's 6.18 VM kernel) commit the page on a read too.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace tandem {

class ZeroedPages {
 public:
  ZeroedPages() = default;
  // bytes > 0. ResourceExhausted (naming the size and errno) when the mapping fails.
  static Result<ZeroedPages> Allocate(size_t bytes);
  ~ZeroedPages();
  ZeroedPages(ZeroedPages&& other) noexcept;
  ZeroedPages& operator=(ZeroedPages&& other) noexcept;
  ZeroedPages(const ZeroedPages&) = delete;
  ZeroedPages& operator=(const ZeroedPages&) = delete;

  void* data() const { return data_; }  // page-aligned; null when empty
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tandem
