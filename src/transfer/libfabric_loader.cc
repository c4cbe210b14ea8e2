// The libfabric functions the libfabric backend calls, forwarded to libfabric opened on first use
// (libfabric_loader.h says why). Built with the backend (CMake: libfabric found,
// TANDEM_HAVE_LIBFABRIC).
#include "transfer/libfabric_loader.h"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include <string>

#include "common/shared_library.h"

#define TANDEM_FI_STR_INNER(x) #x
#define TANDEM_FI_STR(x) TANDEM_FI_STR_INNER(x)

namespace tandem::transfer {
namespace {

// The soname of the API the build compiled against (libfabric 1.x: libfabric.so.1). dlsym gives
// each function's default version, the one a link against the same library binds to
// (fi_getinfo@@FABRIC_1.3 in libfabric 1.17).
constinit LazySharedLibrary g_fabric("libfabric.so." TANDEM_FI_STR(FI_MAJOR_VERSION),
                           "libfabric, for the libfabric transfer backend");

}  // namespace
}  // namespace tandem::transfer

// X(return type, name, (parameters), (arguments), value without the library): every libfabric
// function tandem calls but fi_strerror (below).
#define TANDEM_FI_ENTRY_POINTS(X)                                                                  \
  X(uint32_t, fi_version, (void), (), 0)                                                           \
  X(int, fi_getinfo,                                                                               \
    (uint32_t version, const char* node, const char* service, uint64_t flags,                      \
     const struct fi_info* hints, struct fi_info** info),                                          \
    (version, node, service, flags, hints, info), -FI_ENOSYS)                                      \
  X(void, fi_freeinfo, (struct fi_info * info), (info), )                                          \
  X(struct fi_info*, fi_dupinfo, (const struct fi_info* info), (info), nullptr)                    \
  X(int, fi_fabric, (struct fi_fabric_attr * attr, struct fid_fabric** fabric, void* context),    \
    (attr, fabric, context), -FI_ENOSYS)

// Each forwarder resolves its symbol once. Parameters that differ from fabric.h's make a second C
// function of the same name: a compile error.
#define TANDEM_FI_FORWARD(ret, name, params, args, fail)                                      \
  ret name params {                                                                           \
    static const auto fn =                                                                    \
        reinterpret_cast<ret(*) params>(::tandem::transfer::g_fabric.Symbol(#name));          \
    if (fn == nullptr) return fail;                                                           \
    return fn args;                                                                           \
  }

extern "C" {

TANDEM_FI_ENTRY_POINTS(TANDEM_FI_FORWARD)

// FI_ENOSYS after a load or symbol error: that error's text.
const char* fi_strerror(int errnum) {
  static const auto fn =
      reinterpret_cast<const char* (*)(int)>(::tandem::transfer::g_fabric.Symbol("fi_strerror"));
  const char* load_error = ::tandem::transfer::g_fabric.error();
  if ((errnum == FI_ENOSYS || fn == nullptr) && load_error[0] != '\0') return load_error;
  return fn != nullptr ? fn(errnum) : "libfabric error (libfabric not loaded)";
}

}  // extern "C"

namespace tandem::transfer {

Status LoadLibfabric() {
#define TANDEM_FI_NAME(ret, name, params, args, fail) #name,
  static const char* const kNames[] = {TANDEM_FI_ENTRY_POINTS(TANDEM_FI_NAME) "fi_strerror"};
#undef TANDEM_FI_NAME
  Status st = g_fabric.Load(kNames, std::size(kNames));
  if (!st.ok()) return Status(StatusCode::kFailedPrecondition, "libfabric backend: " + st.message());
  return Status::Ok();
}

bool LibfabricLoaded() { return g_fabric.loaded(); }

}  // namespace tandem::transfer
