// For the transfer fuzz targets: a BackendHost with one host region and one (fake) device region at
// fixed addresses, so that seed inputs can name memory inside them, and a client socket helper.
#pragma once

#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <atomic>
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

// Sends `data` (then the end of the stream) and reads until the peer closes: the target's server
// thread has then finished with these bytes. Aborts when the peer neither closes nor answers
// within 10 s (a hang).
inline void SendAndDrain(int fd, const void* data, size_t size) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) break;  // the target closed early: fine
    p += n;
    size -= static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[16 << 10];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      fprintf(stderr, "fuzz: the target neither answered nor closed within 10 s\n");
      abort();
    }
    break;
  }
  ::close(fd);
}

}  // namespace tandem::fuzz
