// A shared library opened on first use (issue 29, memory): a library that only some runs call into
// (UCX and libfabric for those transfer backends) is not linked, so a process that never uses it
// does not map it, its dependencies, or their relocations. Its loader (transfer/ucx_loader.cc,
// transfer/libfabric_loader.cc) defines the functions tandem calls and forwards each to the symbol
// of the same name that LazySharedLibrary::Symbol resolves.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

#include "common/status.h"

namespace tandem {

// dlopen(soname, RTLD_NOW | RTLD_LOCAL) (the loader's normal search: LD_LIBRARY_PATH, the binary's
// RUNPATH, ld.so.conf): the handle, or Internal "could not load <soname> (<what>): <dlerror()>".
Result<void*> OpenSharedLibrary(const char* soname, const char* what);

// One library, opened by the first Handle() or Symbol() (thread-safe); a failed open is not retried
// and its error is kept. Meant to be a static object (never closed), declared constinit: it is then
// usable from other static initializers (a test's child process runs an agent before main).
class LazySharedLibrary {
 public:
  // soname: what dlopen gets (e.g. "libucp.so.0"); what: for messages ("UCX, for the ucx transfer
  // backend"). Both must outlive the object (string literals).
  constexpr LazySharedLibrary(const char* soname, const char* what)
      : soname_(soname), what_(what) {}

  // The handle, or nullptr once the library could not be opened (error() says why).
  void* Handle();
  // dlsym(Handle(), name): searches the library and the libraries it needs. nullptr when the
  // library could not be opened or has no such symbol; error() then says which.
  void* Symbol(const char* name);
  // Opens the library and resolves each of `names`: Internal with the first error otherwise.
  Status Load(const char* const* names, size_t count);

  bool loaded() const { return loaded_.load(std::memory_order_acquire); }
  const char* soname() const { return soname_; }
  // The first open or symbol error ("" if none; at most kErrorCapacity - 1 bytes, longer ones cut):
  // a stable C string once set (held in the object, never rewritten).
  const char* error() const;

  static constexpr size_t kErrorCapacity = 512;

 private:
  void RecordError(const std::string& message);

  const char* soname_;
  const char* what_;
  std::once_flag once_;
  void* handle_ = nullptr;
  std::atomic<bool> loaded_{false};
  mutable std::mutex error_mu_;
  std::atomic<bool> has_error_{false};
  char error_text_[kErrorCapacity] = {};
};

}  // namespace tandem
