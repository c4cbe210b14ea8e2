// The "libfabric" backend: host memory by libfabric RMA (fi_write on registered memory; libfabric
// 1.17 here; built when CMake finds libfabric, which defines TANDEM_HAVE_LIBFABRIC). fabric_rma.h
// runs the transfers; libfabric_backend.cc (set-up, control messages, progress) and
// libfabric_data.cc (RMA, recovery) are libfabric underneath it. Sources: the libfabric man
// pages (ofiwg.github.io/libfabric: fi_getinfo(3), fi_mr(3), fi_rma(3), fi_msg(3), fi_cq(3),
// fi_av(3), fi_endpoint(3)) and the installed rdma/fabric.h.
//
//   - Provider: fi_getinfo for FI_MSG | FI_RMA on an FI_EP_RDM endpoint, source address "host"
//     (FI_SOURCE), provider by the "provider" param, by default the first of efa, tcp, sockets that
//     answers (on 127.0.0.1 here: tcp, i.e. "tcp;ofi_rxm"). Operations ask for FI_DELIVERY_COMPLETE
//     (a write completes once the data is in the target's memory); a provider without it must give
//     FI_ORDER_SAW | FI_ORDER_SAR instead (the kEnd message then lands after the data).
//   - Memory registration modes handled: FI_MR_LOCAL (local buffers, control buffers included, carry
//     fi_mr_desc), FI_MR_VIRT_ADDR (remote addresses are virtual; otherwise offsets from the region's
//     base), FI_MR_PROV_KEY (the provider's key; otherwise ours, unique per domain),
//     FI_MR_ALLOCATED (registered memory is allocated: true of agent regions). Not: FI_MR_ENDPOINT,
//     FI_MR_RAW, FI_MR_HMEM (device memory comes later).
//   - Metadata: connection info "fi1", provider name (u8 length + bytes), address format (u32), the
//     fi_getname bytes; per region "fi1", key (u64), base address (u64). A peer of another version
//     or provider is refused at LoadPeer.
//   - WRITE: fi_write per coalesced segment (at most 1 GiB each). READ: pushed (fabric_control.h):
//     the target fi_writes its ranges into the initiator's memory under the keys kBegin carries, and
//     answers kGrant once they landed. So no agent ever has an fi_read in flight: libfabric 1.17's
//     tcp;ofi_rxm crashes in fi_close of an endpoint with a half-received READ response.
//   - Peers: fi_av_insert of their address on first use (FI_AV_TABLE). Control messages
//     (fabric_control.h) by fi_send into receive buffers the target posted (fi_recv, 32 x 64 KiB);
//     the target replies to the initiator's address carried in the message.
//   - Completions: one CQ (FI_CQ_FORMAT_MSG, an fd wait object when the provider has one), read on
//     the progress thread; an error (fi_cq_readerr: FI_ECANCELED, FI_EIO, ... when the peer is gone)
//     fails the transfer and marks the peer's address broken: it is removed and inserted again for
//     the next transfer (tcp;ofi_rxm keeps a broken connection otherwise).
//   - Deadline (or a replaced peer with data in flight, or a push past its initiator's deadline):
//     libfabric cannot cancel RMA operations, so the endpoint, its CQ and AV are closed and opened
//     again on the same source address (every transfer with data in flight fails; after fi_close no
//     operation touches memory, and nothing a peer pushes lands any more).
//   - A dead peer is noticed through an operation in flight to it (a CQ error); while a transfer
//     only awaits the peer's answer, a kPing every 200 ms is that operation. A peer that stopped
//     (SIGSTOP) cannot take even that (the send answers -FI_EAGAIN), so after it dies there the
//     transfer ends at its deadline.
// Params: "provider", "host" (default 127.0.0.1), "port" (default: ephemeral), "priority" (default
// 6: below tcp's 10, so tcp stays the default for host memory unless overridden).
#pragma once

#include <memory>

#include "common/status.h"
#include "transfer/backend.h"

namespace tandem::transfer {

// Errors: InvalidArgument for a bad parameter; FailedPrecondition when no provider answers
// (the message says what fi_getinfo reported).
Result<std::unique_ptr<Backend>> MakeLibfabricBackend(BackendHost& host, const BackendParams& params);

}  // namespace tandem::transfer
