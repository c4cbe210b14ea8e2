// What the RMA backends (ucx, libfabric) and every agent decode from a peer: the RMA control
// messages (transfer/fabric_control.h) and the agent metadata a peer publishes
// (transfer/metadata.h). The first input byte picks: even -> DecodeControl of the rest, a decoded
// message re-encoded must decode to the same message, and a kBegin goes through the target's
// GuardTable (pins inside the registered host region, End, Expire); odd -> DecodeMetadata, the
// same round trip.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz_transfer_host.h"
#include "transfer/fabric_control.h"
#include "transfer/metadata.h"

using namespace tandem;
using namespace tandem::transfer;

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "fabric_control_fuzz: invariant broken: %s\n", what);
    abort();
  }
}

bool Same(const rma::ControlMessage& a, const rma::ControlMessage& b) {
  auto same_descs = [](const std::vector<Descriptor>& x, const std::vector<Descriptor>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].addr != y[i].addr || x[i].len != y[i].len) return false;
    return true;
  };
  auto same_push = [](const std::vector<rma::PushSegment>& x, const std::vector<rma::PushSegment>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].target_addr != y[i].target_addr || x[i].initiator_addr != y[i].initiator_addr ||
          x[i].len != y[i].len || x[i].key != y[i].key)
        return false;
    return true;
  };
  return a.type == b.type && a.flags == b.flags && a.xfer_id == b.xfer_id && a.status.code() == b.status.code() &&
         a.status.message() == b.status.message() && a.initiator == b.initiator &&
         a.initiator_instance == b.initiator_instance && a.reply_address == b.reply_address &&
         a.target_instance == b.target_instance && a.op == b.op && a.timeout_ms == b.timeout_ms &&
         a.notification == b.notification && same_descs(a.bounds, b.bounds) && same_push(a.push, b.push) &&
         a.keys == b.keys;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::TheHost();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    auto m = rma::DecodeControl(bytes);
    if (!m.ok()) {
      Check(m.status().code() == StatusCode::kDataLoss, "a bad control message that is not DataLoss");
      return 0;
    }
    auto again = rma::DecodeControl(rma::EncodeControl(*m));
    Check(again.ok() && Same(*m, *again), "a control message changed in a round trip");
    if (m->type == rma::ControlType::kBegin) {
      rma::GuardTable guards(fuzz::TheHost());
      auto now = std::chrono::steady_clock::now();
      Status st = guards.Begin(*m, now);
      Check(st.ok() == (guards.size() == 1), "a pin held after a refused kBegin");
      auto reply = rma::ReplyTo(*m, rma::ControlType::kEnd, Status::Ok());
      Check(guards.End(reply) == st.ok(), "kEnd did not find the pin of its kBegin");
      (void)guards.Begin(*m, now);  // again, to be expired (refused or not)
      guards.Expire(now + std::chrono::milliseconds(m->timeout_ms) + std::chrono::seconds(2));
      Check(guards.size() == 0, "a pin outlived its expiry");
    }
    return 0;
  }
  auto md = DecodeMetadata(bytes);
  if (!md.ok()) return 0;
  auto again = DecodeMetadata(EncodeMetadata(*md));
  Check(again.ok(), "encoded metadata does not decode");
  Check(again->name == md->name && again->instance_id == md->instance_id && again->backends == md->backends &&
            again->regions.size() == md->regions.size(),
        "metadata changed in a round trip");
  for (size_t i = 0; i < md->regions.size(); ++i) {
    const auto& a = md->regions[i];
    const auto& b = again->regions[i];
    Check(a.addr == b.addr && a.len == b.len && a.kind == b.kind && a.device_id == b.device_id &&
              a.backend_info == b.backend_info,
          "a region changed in a round trip");
  }
  return 0;
}
