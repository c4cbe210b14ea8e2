#include "common/zeroed_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace tandem {

Result<ZeroedPages> ZeroedPages::Allocate(size_t bytes) {
  if (bytes == 0) return Err(StatusCode::kInvalidArgument, "ZeroedPages of 0 bytes");
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    return Err(StatusCode::kResourceExhausted, "cannot map {} bytes of memory: {}", bytes, std::strerror(errno));
  }
  ZeroedPages z;
  z.data_ = p;
  z.size_ = bytes;
  return z;
}

ZeroedPages::~ZeroedPages() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

ZeroedPages::ZeroedPages(ZeroedPages&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ZeroedPages& ZeroedPages::operator=(ZeroedPages&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace tandem
