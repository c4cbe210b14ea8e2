// The UCX functions the ucx backend calls, forwarded to libucp opened on first use (ucx_loader.h
// says why). Built with the backend (CMake: UCX found, TANDEM_HAVE_UCX).
#include "transfer/ucx_loader.h"

#include <ucp/api/ucp.h>

#include <string>

#include "common/shared_library.h"

namespace tandem::transfer {
namespace {

// libucp's soname since UCX 1.0; libucs (ucs_status_string) is found through its dependencies.
constinit LazySharedLibrary g_ucp("libucp.so.0", "UCX, for the ucx transfer backend");

}  // namespace
}  // namespace tandem::transfer

// X(return type, name, (parameters), (arguments), value without the library): every UCX function
// tandem calls but ucs_status_string (below).
#define TANDEM_UCX_NO_DEVICE_PTR UCS_STATUS_PTR(UCS_ERR_NO_DEVICE)
#define TANDEM_UCX_ENTRY_POINTS(X)                                                                  \
  X(ucs_status_t, ucp_config_read,                                                                  \
    (const char* env_prefix, const char* filename, ucp_config_t** config_p),                        \
    (env_prefix, filename, config_p), UCS_ERR_NO_DEVICE)                                            \
  X(ucs_status_t, ucp_config_modify, (ucp_config_t * config, const char* name, const char* value),  \
    (config, name, value), UCS_ERR_NO_DEVICE)                                                       \
  X(void, ucp_config_release, (ucp_config_t * config), (config), )                                  \
  X(ucs_status_t, ucp_init_version,                                                                 \
    (unsigned api_major_version, unsigned api_minor_version, const ucp_params_t* params,            \
     const ucp_config_t* config, ucp_context_h* context_p),                                         \
    (api_major_version, api_minor_version, params, config, context_p), UCS_ERR_NO_DEVICE)           \
  X(void, ucp_cleanup, (ucp_context_h context_p), (context_p), )                                    \
  X(ucs_status_t, ucp_worker_create,                                                                \
    (ucp_context_h context, const ucp_worker_params_t* params, ucp_worker_h* worker_p),             \
    (context, params, worker_p), UCS_ERR_NO_DEVICE)                                                 \
  X(void, ucp_worker_destroy, (ucp_worker_h worker), (worker), )                                    \
  X(ucs_status_t, ucp_worker_get_address,                                                           \
    (ucp_worker_h worker, ucp_address_t** address_p, size_t* address_length_p),                     \
    (worker, address_p, address_length_p), UCS_ERR_NO_DEVICE)                                      \
  X(void, ucp_worker_release_address, (ucp_worker_h worker, ucp_address_t* address),                \
    (worker, address), )                                                                            \
  X(ucs_status_t, ucp_worker_get_efd, (ucp_worker_h worker, int* fd), (worker, fd),                 \
    UCS_ERR_NO_DEVICE)                                                                              \
  X(ucs_status_t, ucp_worker_arm, (ucp_worker_h worker), (worker), UCS_ERR_NO_DEVICE)               \
  X(unsigned, ucp_worker_progress, (ucp_worker_h worker), (worker), 0)                              \
  X(ucs_status_t, ucp_worker_set_am_recv_handler,                                                   \
    (ucp_worker_h worker, const ucp_am_handler_param_t* param), (worker, param), UCS_ERR_NO_DEVICE) \
  X(ucs_status_t, ucp_ep_create,                                                                    \
    (ucp_worker_h worker, const ucp_ep_params_t* params, ucp_ep_h* ep_p), (worker, params, ep_p),   \
    UCS_ERR_NO_DEVICE)                                                                              \
  X(ucs_status_ptr_t, ucp_ep_close_nbx, (ucp_ep_h ep, const ucp_request_param_t* param),            \
    (ep, param), TANDEM_UCX_NO_DEVICE_PTR)                                                          \
  X(ucs_status_ptr_t, ucp_ep_flush_nbx, (ucp_ep_h ep, const ucp_request_param_t* param),            \
    (ep, param), TANDEM_UCX_NO_DEVICE_PTR)                                                          \
  X(ucs_status_t, ucp_ep_rkey_unpack, (ucp_ep_h ep, const void* rkey_buffer, ucp_rkey_h* rkey_p),   \
    (ep, rkey_buffer, rkey_p), UCS_ERR_NO_DEVICE)                                                   \
  X(void, ucp_rkey_destroy, (ucp_rkey_h rkey), (rkey), )                                            \
  X(ucs_status_t, ucp_mem_map,                                                                      \
    (ucp_context_h context, const ucp_mem_map_params_t* params, ucp_mem_h* memh_p),                 \
    (context, params, memh_p), UCS_ERR_NO_DEVICE)                                                   \
  X(ucs_status_t, ucp_mem_unmap, (ucp_context_h context, ucp_mem_h memh), (context, memh),          \
    UCS_ERR_NO_DEVICE)                                                                              \
  X(ucs_status_t, ucp_rkey_pack,                                                                    \
    (ucp_context_h context, ucp_mem_h memh, void** rkey_buffer_p, size_t* size_p),                  \
    (context, memh, rkey_buffer_p, size_p), UCS_ERR_NO_DEVICE)                                      \
  X(void, ucp_rkey_buffer_release, (void* rkey_buffer), (rkey_buffer), )                            \
  X(ucs_status_ptr_t, ucp_put_nbx,                                                                  \
    (ucp_ep_h ep, const void* buffer, size_t count, uint64_t remote_addr, ucp_rkey_h rkey,          \
     const ucp_request_param_t* param),                                                             \
    (ep, buffer, count, remote_addr, rkey, param), TANDEM_UCX_NO_DEVICE_PTR)                        \
  X(ucs_status_ptr_t, ucp_get_nbx,                                                                  \
    (ucp_ep_h ep, void* buffer, size_t count, uint64_t remote_addr, ucp_rkey_h rkey,                \
     const ucp_request_param_t* param),                                                             \
    (ep, buffer, count, remote_addr, rkey, param), TANDEM_UCX_NO_DEVICE_PTR)                        \
  X(ucs_status_ptr_t, ucp_am_send_nbx,                                                              \
    (ucp_ep_h ep, unsigned id, const void* header, size_t header_length, const void* buffer,        \
     size_t count, const ucp_request_param_t* param),                                               \
    (ep, id, header, header_length, buffer, count, param), TANDEM_UCX_NO_DEVICE_PTR)                \
  X(ucs_status_t, ucp_request_check_status, (void* request), (request), UCS_ERR_NO_DEVICE)          \
  X(void, ucp_request_cancel, (ucp_worker_h worker, void* request), (worker, request), )            \
  X(void, ucp_request_free, (void* request), (request), )

// Each forwarder resolves its symbol once. Parameters that differ from ucp.h's make a second C
// function of the same name: a compile error.
#define TANDEM_UCX_FORWARD(ret, name, params, args, fail)                                     \
  ret name params {                                                                           \
    static const auto fn =                                                                    \
        reinterpret_cast<ret(*) params>(::tandem::transfer::g_ucp.Symbol(#name));             \
    if (fn == nullptr) return fail;                                                           \
    return fn args;                                                                           \
  }

extern "C" {

TANDEM_UCX_ENTRY_POINTS(TANDEM_UCX_FORWARD)

// UCS_ERR_NO_DEVICE after a load or symbol error: that error's text.
const char* ucs_status_string(ucs_status_t status) {
  static const auto fn = reinterpret_cast<const char* (*)(ucs_status_t)>(
      ::tandem::transfer::g_ucp.Symbol("ucs_status_string"));
  const char* load_error = ::tandem::transfer::g_ucp.error();
  if ((status == UCS_ERR_NO_DEVICE || fn == nullptr) && load_error[0] != '\0') return load_error;
  return fn != nullptr ? fn(status) : "UCX status (libucp not loaded)";
}

}  // extern "C"

namespace tandem::transfer {

Status LoadUcx() {
#define TANDEM_UCX_NAME(ret, name, params, args, fail) #name,
  static const char* const kNames[] = {TANDEM_UCX_ENTRY_POINTS(TANDEM_UCX_NAME) "ucs_status_string"};
#undef TANDEM_UCX_NAME
  Status st = g_ucp.Load(kNames, std::size(kNames));
  if (!st.ok()) return Status(StatusCode::kFailedPrecondition, "ucx backend: " + st.message());
  return Status::Ok();
}

bool UcxLoaded() { return g_ucp.loaded(); }

}  // namespace tandem::transfer
