// HugePageAllocator: a std::allocator for large, randomly probed tables (KvIndex's slots). An
// allocation of 2 MiB or more is aligned to 2 MiB and advised MADV_HUGEPAGE, so that with
// transparent huge pages in "madvise" (or "always") mode the table is backed by 2 MiB pages: a
// probe into a 32 MiB table then finds its translation in the TLB instead of walking page tables
// (4 KiB pages: 8192 of them, more than the second-level TLB holds). Where huge pages are off, or
// madvise fails, it is an ordinary aligned allocation. Smaller allocations use operator new.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

namespace tandem::router {

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  static constexpr size_t kHugePage = size_t{2} << 20;

  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}

  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePage) return static_cast<T*>(::operator new(bytes));
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (!p) throw std::bad_alloc();
    (void)madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure leaves 4 KiB pages
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < kHugePage) {
      ::operator delete(p);
    } else {
      std::free(p);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
};

}  // namespace tandem::router
