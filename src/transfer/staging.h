// Host staging of device memory: a Stager moves device ranges to or from a byte stream (a socket)
// through two pinned host buffers of chunk_bytes each, so that the device copy of one chunk
// overlaps the I/O of the other. A chunk gathers several small ranges (KV blocks) into one
// buffer: one device sync per chunk, not per range.
//
// Not thread-safe: one Stager per thread that moves bytes (a tcp connection's sender, its
// receiver, a server connection). Buffers and streams are created on first use.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>

#include "common/status.h"
#include "transfer/device_copier.h"
#include "transfer/types.h"

namespace tandem::transfer {

// Chunk size of the staging buffers unless a backend is told otherwise (tcp: "staging_chunk_bytes").
inline constexpr uint64_t kDefaultStagingChunkBytes = 4ull << 20;

class Stager {
 public:
  Stager(DeviceCopier& copier, uint64_t chunk_bytes);
  ~Stager();  // waits for copies in flight

  // Reads device memory `ranges` (addr, len, device_id; in order) and hands the bytes to `sink` in
  // order, in pieces of at most chunk_bytes. Returns the first error of the device or the sink;
  // after any return no copy touches the ranges any more.
  Status Send(std::span<const Descriptor> ranges, const std::function<Status(const void*, uint64_t)>& sink);

  // Fills device memory `ranges` from `source`, which must fill the whole buffer it is given
  // (at most chunk_bytes). Returns after the last byte landed on the device. A source error is
  // returned at once; after a device error the rest of the bytes are still taken from the source
  // (and dropped), so that a byte stream stays in step, then the device error is returned.
  Status Receive(std::span<const Descriptor> ranges, const std::function<Status(void*, uint64_t)>& source);

  uint64_t chunk_bytes() const { return chunk_; }

  // One device range of a chunk, at `offset` in the staging buffer.
  struct Piece {
    uint64_t addr = 0;  // device address
    uint64_t len = 0;
    uint64_t offset = 0;
    int32_t device = 0;
  };

 private:
  // Splits `ranges` into chunks of at most chunk_ bytes.
  std::vector<std::vector<Piece>> Plan(std::span<const Descriptor> ranges) const;
  Status EnsureBuffers();
  Result<CopyStream*> StreamFor(int32_t device);
  Status SyncAll();

  DeviceCopier& copier_;
  const uint64_t chunk_;
  PinnedBuffer buf_[2];
  std::map<int32_t, std::unique_ptr<CopyStream>> streams_;
};

// "host" or "cuda:N".
std::string MemoryName(MemoryKind kind, int32_t device_id);

}  // namespace tandem::transfer
