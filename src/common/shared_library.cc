#include "common/shared_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>

namespace tandem {

Result<void*> OpenSharedLibrary(const char* soname, const char* what) {
  dlerror();
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    return Err(StatusCode::kInternal, "could not load {} ({}): {}", soname, what,
               e != nullptr ? e : "dlopen failed");
  }
  return h;
}

void* LazySharedLibrary::Handle() {
  std::call_once(once_, [this] {
    Result<void*> h = OpenSharedLibrary(soname_, what_);
    if (h.ok()) {
      handle_ = *h;
      loaded_.store(true, std::memory_order_release);
    } else {
      RecordError(h.status().message());
    }
  });
  return handle_;
}

void* LazySharedLibrary::Symbol(const char* name) {
  void* h = Handle();
  if (h == nullptr) return nullptr;
  // dlerror() is per thread: clear, look up, read.
  dlerror();
  void* p = dlsym(h, name);
  if (p == nullptr) {
    const char* e = dlerror();
    RecordError(fmt::format("{} ({}) has no symbol {}: {}", soname_, what_, name,
                            e != nullptr ? e : "null"));
  }
  return p;
}

Status LazySharedLibrary::Load(const char* const* names, size_t count) {
  if (Handle() == nullptr) return Status(StatusCode::kInternal, error());
  for (size_t i = 0; i < count; ++i) {
    if (Symbol(names[i]) == nullptr) return Status(StatusCode::kInternal, error());
  }
  return Status::Ok();
}

const char* LazySharedLibrary::error() const {
  return has_error_.load(std::memory_order_acquire) ? error_text_ : "";
}

void LazySharedLibrary::RecordError(const std::string& message) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (has_error_.load(std::memory_order_relaxed)) return;
  size_t n = std::min(message.size(), kErrorCapacity - 1);
  std::memcpy(error_text_, message.data(), n);
  error_text_[n] = '\0';
  has_error_.store(true, std::memory_order_release);
}

}  // namespace tandem
