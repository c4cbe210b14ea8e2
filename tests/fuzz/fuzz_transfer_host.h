// For the transfer fuzz targets: a BackendHost with one host region and one (fake) device region at
// fixed addresses, so that seed inputs can name memory inside them, and a helper that serves one
// input as a connection in the fuzzer's thread.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "transfer/backend.h"
#include "transfer/region_table.h"

namespace tandem::fuzz {

// The host region the peer may write and read: 64 KiB at kHostAddr (mapped there when the
// address is free, else wherever mmap puts it: then inputs must find it through the compares).
inline constexpr uint64_t kHostAddr = 0x40000000;
inline constexpr uint64_t kHostLen = 64 << 10;
// The device region (cuda_ipc pins; tcp refuses device memory without a DeviceCopier). Never
// touched: only its bounds are checked.
inline constexpr uint64_t kDeviceAddr = 0x7f0000000000;
inline constexpr uint64_t kDeviceLen = 1 << 20;
inline const std::string kInstance = "fuzz-instance";

// The bytes a fuzz input sends to a control server: data[1..] after a valid hello of the wire's
// Header (with its `type` set to `hello_type`) when data[0] is odd, so that inputs reach both the
// handshake and what follows it. `size` >= 1.
template <typename Header, typename Type>
std::string WithOptionalHello(const uint8_t* data, size_t size, Type hello_type) {
  std::string bytes;
  if (data[0] & 1) {
    const std::string aux = "fuzz-peer\n" + kInstance;
    Header hello;
    hello.type = hello_type;
    hello.aux_len = static_cast<uint32_t>(aux.size());
    bytes.append(reinterpret_cast<const char*>(&hello), sizeof(hello));
    bytes += aux;
  }
  bytes.append(reinterpret_cast<const char*>(data) + 1, size - 1);
  return bytes;
}

class FuzzHost final : public transfer::BackendHost {
 public:
  FuzzHost() : table_(std::make_shared<transfer::RegionTable>()) {
    void* p = ::mmap(reinterpret_cast<void*>(kHostAddr), kHostLen, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) p = ::mmap(nullptr, kHostLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    host_addr_ = reinterpret_cast<uint64_t>(p);
    if (!table_->Add(host_addr_, kHostLen, transfer::MemoryKind::kHost, 0).ok()) abort();
    if (!table_->Add(kDeviceAddr, kDeviceLen, transfer::MemoryKind::kDevice, 0).ok()) abort();
  }
  const std::string& agent_name() const override { return name_; }
  const std::string& instance_id() const override { return kInstance; }
  Result<transfer::RegionPin> PinRegistered(transfer::MemoryKind kind,
                                            std::span<const transfer::Descriptor> ranges) override {
    return table_->Pin(kind, ranges);
  }
  void DeliverNotification(transfer::Notification n) override { notifications_.fetch_add(1); }
  uint64_t host_addr() const { return host_addr_; }

 private:
  const std::string name_ = "fuzz-target";
  std::shared_ptr<transfer::RegionTable> table_;
  uint64_t host_addr_ = 0;
  std::atomic<uint64_t> notifications_{0};
};

// Serves `bytes` as the whole of one connection in the calling thread: writes them into one end
// of a unix socketpair and shuts down that end's write side (the server reads them, then the end
// of the stream), then calls `serve(fd)` on the other end, which is non-blocking so that no wait
// sleeps: a full send buffer is a tick that returns at once, and the server's stall timeout ends
// it after its count of ticks. Both ends get large send buffers (SO_SNDBUFFORCE where permitted,
// else SO_SNDBUF up to the system's cap) so that the answers to an input of max_len fit. Aborts
// when the pair cannot be made or the bytes not written whole.
template <typename Serve>
void ServeInThisThread(const std::string& bytes, Serve&& serve) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    perror("fuzz: socketpair");
    abort();
  }
  const int buf = 32 << 20;
  for (int fd : sv) {
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf)) != 0) {
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  const char* p = bytes.data();
  for (size_t left = bytes.size(); left > 0;) {
    ssize_t n = ::send(sv[1], p, left, MSG_NOSIGNAL);
    if (n <= 0) {
      perror("fuzz: writing the input into the socketpair");
      abort();
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  ::shutdown(sv[1], SHUT_WR);
  serve(sv[0]);
  ::close(sv[0]);
  ::close(sv[1]);
}

// The one host of a target's process (made at LLVMFuzzerInitialize, never destroyed: the fuzzer
// may exit from any thread).
inline FuzzHost& TheHost() {
  static auto* host = new FuzzHost;
  return *host;
}

// The stop flag of a serving function that is never asked to stop.
inline const std::atomic<bool> kNotStopping{false};

}  // namespace tandem::fuzz
