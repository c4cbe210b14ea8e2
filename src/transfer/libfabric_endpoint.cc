#include "transfer/libfabric_endpoint.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tandem::transfer::fabric {

namespace {

constexpr std::string_view kPrefix = "fi1";

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
bool Get(std::string_view& in, T* v) {
  if (in.size() < sizeof(T)) return false;
  std::memcpy(v, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return true;
}

}  // namespace

Status FiError(std::string_view what, int64_t rc, StatusCode code) {
  return Err(code, "libfabric: {}: {}", what, fi_strerror(static_cast<int>(rc < 0 ? -rc : rc)));
}

Status FiEndpoint::Open(const FiParams& params) {
  std::vector<std::string> candidates;
  if (params.provider.empty()) {
    candidates = {"efa", "tcp", "sockets"};
  } else {
    candidates = {params.provider};
  }
  std::string tried;
  for (const std::string& prov : candidates) {
    // First with delivery-complete operations, then with send-after-write/read ordering.
    for (int attempt = 0; attempt < 2 && !info_; ++attempt) {
      fi_info* hints = fi_allocinfo();
      hints->caps = FI_MSG | FI_RMA;
      hints->mode = FI_CONTEXT | FI_CONTEXT2;
      hints->ep_attr->type = FI_EP_RDM;
      hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED;
      hints->domain_attr->threading = FI_THREAD_DOMAIN;  // one thread calls in
      if (attempt == 0) {
        hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
      } else {
        hints->tx_attr->msg_order = FI_ORDER_SAW | FI_ORDER_SAR;
      }
      hints->fabric_attr->prov_name = strdup(prov.c_str());
      fi_info* info = nullptr;
      int rc = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), params.host.c_str(),
                          params.port.empty() ? nullptr : params.port.c_str(), FI_SOURCE, hints, &info);
      fi_freeinfo(hints);
      if (rc == 0 && info) {
        info_ = fi_dupinfo(info);
        fi_freeinfo(info);
        delivery_complete_ = attempt == 0;
      } else if (attempt == 1) {
        tried += fmt::format("{}{}: {}", tried.empty() ? "" : ", ", prov, fi_strerror(-rc));
      }
    }
    if (info_) break;
  }
  if (!info_) {
    return Err(StatusCode::kFailedPrecondition,
               "libfabric {}.{}: no provider gives FI_MSG|FI_RMA on an RDM endpoint at {} ({})",
               FI_MAJOR(fi_version()), FI_MINOR(fi_version()), params.host, tried);
  }
  provider_ = info_->fabric_attr->prov_name ? info_->fabric_attr->prov_name : "";
  mr_mode_ = info_->domain_attr->mr_mode;
  max_msg_size_ = info_->ep_attr->max_msg_size;
  addr_format_ = info_->addr_format;
  if (mr_mode_ & (FI_MR_ENDPOINT | FI_MR_RAW | FI_MR_HMEM)) {
    return Err(StatusCode::kFailedPrecondition, "libfabric provider {} asks for memory registration mode {:#x}",
               provider_, mr_mode_);
  }
  int rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
  if (rc) return FiError("fi_fabric", rc);
  rc = fi_domain(fabric_, info_, &domain_, nullptr);
  if (rc) return FiError("fi_domain", rc);
  TANDEM_RETURN_IF_ERROR(OpenEndpoint());
  // Reopen binds the same address.
  std::free(info_->src_addr);
  info_->src_addr = std::malloc(address_.size());
  std::memcpy(info_->src_addr, address_.data(), address_.size());
  info_->src_addrlen = address_.size();
  return Status::Ok();
}

Status FiEndpoint::OpenEndpoint() {
  fi_cq_attr ca{};
  ca.format = FI_CQ_FORMAT_MSG;
  ca.size = std::max<size_t>(1024, info_->tx_attr->size + info_->rx_attr->size);
  ca.wait_obj = FI_WAIT_FD;
  int rc = fi_cq_open(domain_, &ca, &cq_, nullptr);
  if (rc) {  // no fd to wait on: the progress thread polls
    ca.wait_obj = FI_WAIT_NONE;
    rc = fi_cq_open(domain_, &ca, &cq_, nullptr);
    if (rc) return FiError("fi_cq_open", rc);
  }
  wait_fd_ = -1;
  if (ca.wait_obj == FI_WAIT_FD && fi_control(&cq_->fid, FI_GETWAIT, &wait_fd_) != 0) wait_fd_ = -1;
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  if ((rc = fi_av_open(domain_, &aa, &av_, nullptr))) return FiError("fi_av_open", rc);
  if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr))) return FiError("fi_endpoint", rc);
  if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV))) return FiError("fi_ep_bind(cq)", rc);
  if ((rc = fi_ep_bind(ep_, &av_->fid, 0))) return FiError("fi_ep_bind(av)", rc);
  if ((rc = fi_enable(ep_))) return FiError("fi_enable", rc);
  std::string name(256, '\0');
  size_t len = name.size();
  rc = fi_getname(&ep_->fid, name.data(), &len);
  if (rc == -FI_ETOOSMALL) {
    name.resize(len);
    rc = fi_getname(&ep_->fid, name.data(), &len);
  }
  if (rc) return FiError("fi_getname", rc);
  name.resize(len);
  if (!address_.empty() && name != address_) {
    return Err(StatusCode::kInternal, "libfabric: the reopened endpoint has another address");
  }
  address_ = std::move(name);
  return Status::Ok();
}

void FiEndpoint::CloseEndpoint() {
  if (ep_) fi_close(&ep_->fid);
  if (av_) fi_close(&av_->fid);
  if (cq_) fi_close(&cq_->fid);
  ep_ = nullptr;
  av_ = nullptr;
  cq_ = nullptr;
  wait_fd_ = -1;
}

Status FiEndpoint::Reopen() {
  CloseEndpoint();
  if (!domain_) return Err(StatusCode::kFailedPrecondition, "libfabric: no domain");
  Status st = OpenEndpoint();
  if (!st.ok()) CloseEndpoint();
  return st;
}

void FiEndpoint::Close() {
  CloseEndpoint();
  if (domain_) fi_close(&domain_->fid);
  if (fabric_) fi_close(&fabric_->fid);
  domain_ = nullptr;
  fabric_ = nullptr;
  if (info_) fi_freeinfo(info_);
  info_ = nullptr;
}

std::string EncodeConnectionInfo(const std::string& provider, uint32_t addr_format, const std::string& address) {
  std::string out(kPrefix);
  Put(out, static_cast<uint8_t>(provider.size()));
  out += provider;
  Put(out, addr_format);
  out += address;
  return out;
}

Result<PeerAddress> DecodeConnectionInfo(const std::string& info) {
  std::string_view in(info);
  if (in.substr(0, kPrefix.size()) != kPrefix) {
    return Err(StatusCode::kFailedPrecondition, "libfabric: the peer's address has another format");
  }
  in.remove_prefix(kPrefix.size());
  uint8_t n = 0;
  PeerAddress a;
  if (!Get(in, &n) || in.size() < n) return Err(StatusCode::kDataLoss, "libfabric: truncated peer address");
  a.provider.assign(in.substr(0, n));
  in.remove_prefix(n);
  if (!Get(in, &a.addr_format) || in.empty()) return Err(StatusCode::kDataLoss, "libfabric: truncated peer address");
  a.address.assign(in);
  return a;
}

std::string EncodeRegionKey(uint64_t key, uint64_t base) {
  std::string out(kPrefix);
  Put(out, key);
  Put(out, base);
  return out;
}

Result<std::pair<uint64_t, uint64_t>> DecodeRegionKey(const std::string& blob) {
  std::string_view in(blob);
  uint64_t key = 0, base = 0;
  if (in.substr(0, kPrefix.size()) != kPrefix) return Err(StatusCode::kDataLoss, "libfabric: a key of another format");
  in.remove_prefix(kPrefix.size());
  if (!Get(in, &key) || !Get(in, &base) || !in.empty()) return Err(StatusCode::kDataLoss, "libfabric: a bad key");
  return std::make_pair(key, base);
}

}  // namespace tandem::transfer::fabric
