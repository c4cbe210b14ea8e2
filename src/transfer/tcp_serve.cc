#include "transfer/tcp_serve.h"

#include <sys/socket.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/logging.h"
#include "transfer/tcp_wire.h"

namespace tandem::transfer::tcp {

namespace {

// Answers one request: kAck, or kError with the Status's code and message.
Status Respond(int fd, uint64_t id, const Status& result, const Tick& tick) {
  FrameHeader r;
  r.xfer_id = id;
  std::string aux;
  if (result.ok()) {
    r.type = FrameType::kAck;
  } else {
    r.type = FrameType::kError;
    r.status_code = static_cast<uint32_t>(result.code());
    aux = result.message();
    r.aux_len = static_cast<uint32_t>(aux.size());
  }
  TANDEM_RETURN_IF_ERROR(SendAll(fd, &r, sizeof(r), tick));
  return SendAll(fd, aux.data(), aux.size(), tick);
}

}  // namespace

void ServeConnection(int fd, BackendHost& host, const ServeOptions& options, const std::atomic<bool>& stopping) {
  // The hello must arrive (and its answer leave) within handshake_timeout_ms of the call (the
  // listener calls this right after the accept).
  const auto accepted = std::chrono::steady_clock::now();
  auto handshake = [&](int) {
    if (stopping) return Err(StatusCode::kFailedPrecondition, "stopping");
    if (std::chrono::steady_clock::now() - accepted >
        std::chrono::milliseconds(options.handshake_timeout_ms)) {
      log::debug("tcp transfer backend of {}: dropped a connection without a hello within {} ms",
                 host.agent_name(), options.handshake_timeout_ms);
      return Err(StatusCode::kInternal, "no hello");
    }
    return Status::Ok();
  };
  auto idle = [&](int) { return stopping ? Err(StatusCode::kFailedPrecondition, "stopping") : Status::Ok(); };
  auto stall = [&](int ticks) {
    if (stopping) return Err(StatusCode::kFailedPrecondition, "stopping");
    if (ticks * kTickMs > options.io_timeout_ms) return Err(StatusCode::kInternal, "peer stalled mid-message");
    return Status::Ok();
  };
  FrameHeader h;
  if (!RecvAll(fd, &h, sizeof(h), handshake).ok() || h.magic != kMagic ||
      h.type != FrameType::kHello || h.aux_len > 4096) {
    return;
  }
  std::string hello(h.aux_len, '\0');
  if (!RecvAll(fd, hello.data(), hello.size(), handshake).ok()) return;
  auto nl = hello.find('\n');
  std::string peer = hello.substr(0, nl);
  if (nl == std::string::npos || hello.substr(nl + 1) != host.instance_id()) {
    FrameHeader r;
    r.type = FrameType::kError;
    std::string msg = fmt::format("this listener is agent {} instance {}", host.agent_name(), host.instance_id());
    r.status_code = static_cast<uint32_t>(StatusCode::kFailedPrecondition);
    r.aux_len = static_cast<uint32_t>(msg.size());
    (void)SendAll(fd, &r, sizeof(r), handshake);
    (void)SendAll(fd, msg.data(), msg.size(), handshake);
    return;
  }
  FrameHeader ok;
  ok.type = FrameType::kHelloOk;
  if (!SendAll(fd, &ok, sizeof(ok), handshake).ok()) return;
  std::unique_ptr<Stager> stager;  // device memory of this agent, staged (created on first use)
  for (;;) {
    auto* bytes = reinterpret_cast<char*>(&h);
    if (!RecvAll(fd, bytes, 1, idle).ok() || !RecvAll(fd, bytes + 1, sizeof(h) - 1, stall).ok()) return;
    if (h.magic != kMagic || h.num_segments > kMaxSegments || h.aux_len > kMaxAux) return;
    if (h.target_kind > static_cast<uint8_t>(MemoryKind::kDevice)) return;
    const auto kind = static_cast<MemoryKind>(h.target_kind);
    std::vector<WireSegment> wire;
    std::string aux;
    if (!RecvArray(fd, &wire, h.num_segments, stall).ok()) return;
    if (!RecvArray(fd, &aux, h.aux_len, stall).ok()) return;
    std::vector<Descriptor> ranges;
    uint64_t total = 0;
    for (const WireSegment& w : wire) {
      ranges.push_back({w.addr, w.len, w.device_id});
      total += w.len;
    }
    Status result;
    if (kind == MemoryKind::kDevice && (h.type == FrameType::kWrite || h.type == FrameType::kRead)) {
      if (!host.device_copier()) {
        result = Err(StatusCode::kFailedPrecondition,
                     "agent {} has no DeviceCopier: the tcp backend cannot stage its device memory",
                     host.agent_name());
      } else if (!stager) {
        stager = std::make_unique<Stager>(*host.device_copier(), options.staging_chunk_bytes);
      }
    }
    if (h.type == FrameType::kWrite) {
      if (total != h.payload_len) return;  // protocol error
      // Our side of the bounds check.
      Result<RegionPin> pin = result.ok() ? host.PinRegistered(kind, ranges) : Result<RegionPin>(result);
      if (!pin.ok()) {
        result = pin.status();
        if (!Discard(fd, h.payload_len, stall).ok()) return;
      } else if (kind == MemoryKind::kDevice) {
        // Into pinned buffers, then onto the device; the ack goes out after the last copy landed.
        bool io_failed = false;
        result = stager->Receive(ranges, [&](void* p, uint64_t n) {
          Status st = RecvAll(fd, p, n, stall);
          io_failed = !st.ok();
          return st;
        });
        if (io_failed) return;
        pin->Release();
        if (result.ok() && (h.flags & kHasNotification)) host.DeliverNotification({peer, aux});
      } else {
        for (const Descriptor& d : ranges) {
          if (!RecvAll(fd, reinterpret_cast<void*>(d.addr), d.len, stall).ok()) return;
        }
        pin->Release();
        if (h.flags & kHasNotification) host.DeliverNotification({peer, aux});
      }
    } else if (h.type == FrameType::kRead) {
      Result<RegionPin> pin = result.ok() ? host.PinRegistered(kind, ranges) : Result<RegionPin>(result);
      if (pin.ok()) {
        FrameHeader r;
        r.type = FrameType::kReadData;
        r.xfer_id = h.xfer_id;
        r.payload_len = total;
        if (!SendAll(fd, &r, sizeof(r), stall).ok()) return;
        if (kind == MemoryKind::kDevice) {
          // A device error past the header cannot be answered in band: the connection drops.
          Status st = stager->Send(ranges, [&](const void* p, uint64_t n) { return SendAll(fd, p, n, stall); });
          if (!st.ok()) {
            log::warn("tcp transfer backend of {}: READ of {} for {} failed: {}", host.agent_name(),
                      MemoryName(kind, ranges.empty() ? 0 : ranges[0].device_id), peer, st.ToString());
            return;
          }
          continue;
        }
        for (const Descriptor& d : ranges) {
          if (!SendAll(fd, reinterpret_cast<const void*>(d.addr), d.len, stall).ok()) return;
        }
        continue;
      }
      result = pin.status();
    } else if (h.type == FrameType::kNotify) {
      host.DeliverNotification({peer, aux});
    } else {
      return;
    }
    if (!Respond(fd, h.xfer_id, result, stall).ok()) return;
  }
}

}  // namespace tandem::transfer::tcp
