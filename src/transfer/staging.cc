#include "transfer/staging.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace tandem::transfer {

std::string MemoryName(MemoryKind kind, int32_t device_id) {
  return kind == MemoryKind::kHost ? std::string("host") : fmt::format("cuda:{}", device_id);
}

Stager::Stager(DeviceCopier& copier, uint64_t chunk_bytes)
    : copier_(copier), chunk_(std::max<uint64_t>(chunk_bytes, 4096)) {}

Stager::~Stager() { (void)SyncAll(); }

std::vector<std::vector<Stager::Piece>> Stager::Plan(std::span<const Descriptor> ranges) const {
  std::vector<std::vector<Piece>> chunks;
  uint64_t filled = chunk_;
  for (const Descriptor& d : ranges) {
    for (uint64_t off = 0; off < d.len;) {
      if (filled == chunk_) {
        chunks.emplace_back();
        filled = 0;
      }
      const uint64_t take = std::min(d.len - off, chunk_ - filled);
      chunks.back().push_back({d.addr + off, take, filled, d.device_id});
      filled += take;
      off += take;
    }
  }
  return chunks;
}

Status Stager::EnsureBuffers() {
  for (PinnedBuffer& b : buf_) {
    if (b.data()) continue;
    TANDEM_ASSIGN_OR_RETURN(b, copier_.AllocPinned(chunk_));
    if (b.size() < chunk_) return Err(StatusCode::kInternal, "pinned buffer of {} bytes for {}", b.size(), chunk_);
  }
  return Status::Ok();
}

Result<CopyStream*> Stager::StreamFor(int32_t device) {
  auto it = streams_.find(device);
  if (it != streams_.end()) return it->second.get();
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<CopyStream> s, copier_.NewStream(device));
  CopyStream* raw = s.get();
  streams_[device] = std::move(s);
  return raw;
}

Status Stager::SyncAll() {
  Status first;
  for (auto& [device, stream] : streams_) {
    Status st = stream->Sync();
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

namespace {

uint64_t ChunkBytes(const std::vector<Stager::Piece>& chunk) {
  return chunk.empty() ? 0 : chunk.back().offset + chunk.back().len;
}

}  // namespace

Status Stager::Send(std::span<const Descriptor> ranges, const std::function<Status(const void*, uint64_t)>& sink) {
  const auto chunks = Plan(ranges);
  if (chunks.empty()) return Status::Ok();
  // The stream first: the CUDA copier then allocates the buffers with this thread on that device
  // (not on device 0, whose context a worker on another GPU should not create).
  TANDEM_RETURN_IF_ERROR(StreamFor(chunks[0][0].device).status());
  TANDEM_RETURN_IF_ERROR(EnsureBuffers());
  // Enqueues the device -> host copies of chunk i into buffer i % 2.
  auto fill = [&](size_t i) -> Status {
    uint8_t* buf = buf_[i % 2].data();
    for (const Piece& p : chunks[i]) {
      TANDEM_ASSIGN_OR_RETURN(CopyStream * s, StreamFor(p.device));
      TANDEM_RETURN_IF_ERROR(s->ToHost(buf + p.offset, p.addr, p.len));
    }
    return Status::Ok();
  };
  Status st = fill(0);
  for (size_t i = 0; st.ok() && i < chunks.size(); ++i) {
    st = SyncAll();  // chunk i is in buffer i % 2; nothing else is in flight
    if (st.ok() && i + 1 < chunks.size()) st = fill(i + 1);  // overlaps the send of chunk i
    if (st.ok()) st = sink(buf_[i % 2].data(), ChunkBytes(chunks[i]));
  }
  Status synced = SyncAll();  // after an error: no copy may still touch the ranges
  return st.ok() ? synced : st;
}

Status Stager::Receive(std::span<const Descriptor> ranges, const std::function<Status(void*, uint64_t)>& source) {
  const auto chunks = Plan(ranges);
  if (chunks.empty()) return Status::Ok();
  Status device_error = StreamFor(chunks[0][0].device).status();  // before the buffers: see Send
  if (device_error.ok()) device_error = EnsureBuffers();
  std::vector<uint8_t> scratch;  // for the bytes of a stream whose buffers could not be had
  if (!device_error.ok()) scratch.resize(chunk_);
  for (size_t i = 0; i < chunks.size(); ++i) {
    uint8_t* buf = device_error.ok() ? buf_[i % 2].data() : scratch.data();
    // Buffer i % 2 was last used by chunk i - 2, whose copy the previous round waited for.
    Status st = source(buf, ChunkBytes(chunks[i]));
    if (!st.ok()) {
      (void)SyncAll();
      return st;
    }
    if (!device_error.ok()) continue;
    device_error = SyncAll();  // chunk i - 1 landed: its buffer is free for chunk i + 1
    for (const Piece& p : chunks[i]) {
      if (!device_error.ok()) break;
      auto s = StreamFor(p.device);
      device_error = s.ok() ? (*s)->FromHost(p.addr, buf + p.offset, p.len) : s.status();
    }
    if (!device_error.ok()) {
      (void)SyncAll();
      scratch.resize(chunk_);  // drain the rest: the buffers may still be the target of a copy
    }
  }
  Status synced = SyncAll();
  return device_error.ok() ? synced : device_error;
}

}  // namespace tandem::transfer
