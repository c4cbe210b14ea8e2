// The "ucx" backend: host memory by UCP RMA (UCX 1.13+; built when CMake finds UCX, which defines
// TANDEM_HAVE_UCX). fabric_rma.h runs the transfers; this file is UCP underneath it.
//
// One UCP context and worker per agent (features RMA, AM, WAKEUP); the base's progress thread is
// the only one calling into them (thread mode SINGLE; registrations run there too). Sources: the
// UCP API reference (openucx.github.io/ucx/api, ucp.h of the installed UCX).
//   - Metadata: the worker address as this backend's connection info, "ucx1" + the bytes of
//     ucp_worker_get_address; per registered region, "ucx1" + the remote key packed by
//     ucp_rkey_pack of its ucp_mem_map handle. Another prefix is refused at LoadPeer (versioned).
//   - Endpoints: created lazily per peer from its worker address, error handling mode PEER; its
//     error callback breaks the peer's transfers (UCS_ERR_CONNECTION_RESET, ..._ENDPOINT_TIMEOUT)
//     and the endpoint is closed (a later transfer makes a new one). Remote keys are unpacked per
//     endpoint on first use and destroyed with it.
//   - Data: ucp_put_nbx (WRITE) / ucp_get_nbx (READ) per coalesced segment, then ucp_ep_flush_nbx,
//     whose completion means every operation completed remotely: then the data phase is done.
//   - Control messages (fabric_control.h): active messages (ucp_am_send_nbx, id 0x7a, eager, with
//     a reply endpoint); the target answers on the reply endpoint.
//   - Deadline or a replaced peer: ucp_ep_close_nbx with UCP_EP_CLOSE_FLAG_FORCE cancels the
//     endpoint's requests (UCS_ERR_CANCELED), so no operation touches memory after DataDone.
//   - Waiting: ucp_worker_arm + epoll on ucp_worker_get_efd and an eventfd (Post wakes the thread).
//
// Transports: UCX's own choice, except that, when the advertised host is a loopback address and
// neither UCX_TLS nor the "tls" parameter says otherwise, UCX_TLS=tcp and UCX_NET_DEVICES=lo are set
// through ucp_config_modify: UCX 1.13 gives no shared-memory transport (self, posix, sysv, cma) to
// an endpoint that asks for peer failure handling, so tcp over lo is what runs here. The tcp
// transport's segment size (UCX_TCP_TX_SEG_SIZE / RX_SEG_SIZE) is raised to 512 KiB unless set.
// Params: "host" (default 127.0.0.1; loopback selects the above), "tls" (UCX_TLS), "net_devices"
// (UCX_NET_DEVICES), "priority" (default 8: below tcp's 10, so tcp stays the default for host
// memory unless overridden).
#pragma once

#include <memory>

#include "common/status.h"
#include "transfer/backend.h"

namespace tandem::transfer {

// Errors: InvalidArgument for a bad parameter; FailedPrecondition when UCX finds no usable
// transport (the message says what UCX reported).
Result<std::unique_ptr<Backend>> MakeUcxBackend(BackendHost& host, const BackendParams& params);

}  // namespace tandem::transfer
