// The libfabric objects of one "libfabric" backend (libfabric_backend.h says how they are used):
// fabric and domain for the backend's life; endpoint, completion queue and address vector, which
// Reopen closes and opens again on the same source address (the only way to stop RMA operations
// in flight). Plus the metadata blobs. Not thread-safe: the backend's progress thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "common/status.h"

namespace tandem::transfer::fabric {

struct FiParams {
  std::string provider;  // "" = the first of efa, tcp, sockets that answers
  std::string host = "127.0.0.1";
  std::string port;  // "" = ephemeral
  int priority = 6;
};

// A negative libfabric return code as a Status ("libfabric: <what>: <fi_strerror>").
Status FiError(std::string_view what, int64_t rc, StatusCode code = StatusCode::kInternal);

class FiEndpoint {
 public:
  FiEndpoint() = default;
  FiEndpoint(const FiEndpoint&) = delete;
  FiEndpoint& operator=(const FiEndpoint&) = delete;
  ~FiEndpoint() { Close(); }

  // fi_getinfo (FailedPrecondition when no provider answers), fabric, domain, then the endpoint.
  Status Open(const FiParams& params);
  // Closes the endpoint, CQ and AV (dropping every operation in flight) and opens new ones bound to
  // the same address.
  Status Reopen();
  // Closes the endpoint, CQ and AV: no operation touches memory afterwards. Close() then the rest
  // (memory registrations must be closed in between).
  void CloseEndpoint();
  void Close();

  fid_ep* ep() const { return ep_; }
  fid_cq* cq() const { return cq_; }
  fid_av* av() const { return av_; }
  fid_domain* domain() const { return domain_; }
  fid_fabric* fabric() const { return fabric_; }
  bool open() const { return ep_ != nullptr; }
  uint64_t mr_mode() const { return mr_mode_; }
  int wait_fd() const { return wait_fd_; }  // -1: the CQ has no fd to wait on
  uint64_t max_msg_size() const { return max_msg_size_; }
  const std::string& provider() const { return provider_; }
  uint32_t addr_format() const { return addr_format_; }
  const std::string& address() const { return address_; }  // fi_getname bytes
  bool delivery_complete() const { return delivery_complete_; }

 private:
  Status OpenEndpoint();

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_ep* ep_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  int wait_fd_ = -1;
  uint64_t mr_mode_ = 0;
  uint64_t max_msg_size_ = 0;
  std::string provider_;
  uint32_t addr_format_ = 0;
  std::string address_;
  bool delivery_complete_ = false;
};

// Metadata blobs (version "fi1").
std::string EncodeConnectionInfo(const std::string& provider, uint32_t addr_format, const std::string& address);
struct PeerAddress {
  std::string provider;
  uint32_t addr_format = 0;
  std::string address;
};
Result<PeerAddress> DecodeConnectionInfo(const std::string& info);
std::string EncodeRegionKey(uint64_t key, uint64_t base);
// {key, base}; DataLoss for another format.
Result<std::pair<uint64_t, uint64_t>> DecodeRegionKey(const std::string& blob);

}  // namespace tandem::transfer::fabric
