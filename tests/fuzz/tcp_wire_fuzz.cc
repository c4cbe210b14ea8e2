// The tcp transfer backend's target side (transfer/tcp_serve.h, wire format in tcp_wire.h): the
// bytes a peer sends on a data connection, served by tcp::ServeConnection (what the listener of
// MakeTcpBackend runs on each accepted connection) in the fuzzer's thread over a socketpair.
// The first input byte: bit 0 set -> a valid hello (this agent's instance) goes first, so that the
// rest reaches the request loop (kWrite, kRead, kNotify frames against the registered host region
// at fuzz::kHostAddr); clear -> the rest is the whole conversation. The target must answer,
// return at the end of the bytes, and never touch memory outside its registrations (ASan).
#include <atomic>
#include <cstdint>
#include <string>

#include "fuzz_transfer_host.h"
#include "transfer/tcp_serve.h"
#include "transfer/tcp_wire.h"

using namespace tandem;
using namespace tandem::transfer;

namespace {

// The listener's defaults but io_timeout_ms (as the earlier listener-driven target had it): a
// full send buffer ends the connection after 100 ticks, which return at once here.
const tcp::ServeOptions kOptions{5000, 2000, transfer::kDefaultStagingChunkBytes};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::TheHost();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes = fuzz::WithOptionalHello<tcp::FrameHeader>(data, size, tcp::FrameType::kHello);
  fuzz::ServeInThisThread(bytes, [](int fd) { tcp::ServeConnection(fd, fuzz::TheHost(), kOptions, fuzz::kNotStopping); });
  return 0;
}
