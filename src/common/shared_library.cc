#include "common/shared_library.h"

#include <dlfcn.h>

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
  const char* e = error_.load(std::memory_order_acquire);
  return e != nullptr ? e : "";
}

void LazySharedLibrary::RecordError(const std::string& message) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_.load() == nullptr) error_.store((new std::string(message))->c_str());
}

}  // namespace tandem
