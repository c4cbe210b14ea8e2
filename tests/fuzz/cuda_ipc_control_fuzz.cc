// The cuda_ipc backend's control server (transfer/cuda_ipc_control.h): the bytes a peer process
// sends on its control socket, served by ipc::ServeControlConnection (what ControlServer runs on
// each accepted connection) in the fuzzer's thread over a socketpair. The first input byte: bit 0
// set -> a valid hello (this agent's instance) goes first, so that the rest reaches the BEGIN/END
// loop (pins of the device region at fuzz::kDeviceAddr); clear -> the rest is the whole
// conversation. The server must answer, return at the end of the bytes, and never touch memory
// it should not (ASan).
#include <atomic>
#include <cstdint>
#include <string>

#include "fuzz_transfer_host.h"
#include "transfer/cuda_ipc_control.h"

using namespace tandem;
using namespace tandem::transfer;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::TheHost();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes = fuzz::WithOptionalHello<ipc::MsgHeader>(data, size, ipc::MsgType::kHello);
  fuzz::ServeInThisThread(bytes, [](int fd) { ipc::ServeControlConnection(fd, fuzz::TheHost(), fuzz::kNotStopping); });
  return 0;
}
