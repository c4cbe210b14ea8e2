#include "transfer/metadata.h"

#include <unistd.h>

#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace tandem::transfer {

using nlohmann::json;

namespace {

json Bytes(const std::string& s) { return json::binary(std::vector<uint8_t>(s.begin(), s.end())); }

std::string FromBytes(const json& j) {
  if (j.is_binary()) return std::string(j.get_binary().begin(), j.get_binary().end());
  return j.get<std::string>();
}

}  // namespace

std::string RandomId() {
  std::random_device rd;  // per call: a forked child must not repeat its parent's ids
  auto word = [&] { return (static_cast<uint64_t>(rd()) << 32) ^ rd(); };
  return fmt::format("{:016x}{:016x}", word(), word() ^ static_cast<uint64_t>(getpid()));
}

std::string ThisProcessId() {
  static const std::string nonce = RandomId();
  return fmt::format("{}-{}", getpid(), nonce);  // a forked child has another pid
}

std::string ThisHostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string ThisBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

Locality LocalityOf(const AgentMetadata& peer) {
  if (peer.process_id == ThisProcessId()) return Locality::kSameProcess;
  if (peer.hostname == ThisHostname() && peer.boot_id == ThisBootId()) return Locality::kSameNode;
  return Locality::kRemote;
}

std::string EncodeMetadata(const AgentMetadata& md) {
  json j;
  j["version"] = kMetadataVersion;
  j["name"] = md.name;
  j["instance_id"] = md.instance_id;
  j["hostname"] = md.hostname;
  j["boot_id"] = md.boot_id;
  j["process_id"] = md.process_id;
  json backends = json::object();
  for (const auto& [name, info] : md.backends) backends[name] = Bytes(info);
  j["backends"] = std::move(backends);
  json regions = json::array();
  for (const auto& r : md.regions) {
    json jr;
    jr["addr"] = r.addr;
    jr["len"] = r.len;
    jr["kind"] = static_cast<int>(r.kind);
    jr["device_id"] = r.device_id;
    json info = json::object();
    for (const auto& [name, blob] : r.backend_info) info[name] = Bytes(blob);
    jr["backend_info"] = std::move(info);
    regions.push_back(std::move(jr));
  }
  j["regions"] = std::move(regions);
  std::vector<uint8_t> cbor = json::to_cbor(j);
  return std::string(cbor.begin(), cbor.end());
}

Result<AgentMetadata> DecodeMetadata(std::string_view bytes) {
  json j;
  try {
    j = json::from_cbor(bytes.begin(), bytes.end(), /*strict=*/true, /*allow_exceptions=*/false);
  } catch (const json::exception& e) {
    // allow_exceptions=false still throws for an array or object header of an excessive size
    // (nlohmann 3.11: out_of_range.408 from the DOM parser), which a peer's bytes may claim.
    return Err(StatusCode::kDataLoss, "agent metadata is not CBOR: {}", e.what());
  }
  if (j.is_discarded() || !j.is_object()) return Err(StatusCode::kDataLoss, "agent metadata is not CBOR");
  try {
    if (j.at("version").get<uint32_t>() != kMetadataVersion) {
      return Err(StatusCode::kInvalidArgument, "agent metadata version {} (expected {})",
                 j.at("version").get<uint32_t>(), kMetadataVersion);
    }
    AgentMetadata md;
    md.name = j.at("name").get<std::string>();
    md.instance_id = j.at("instance_id").get<std::string>();
    md.hostname = j.at("hostname").get<std::string>();
    md.boot_id = j.at("boot_id").get<std::string>();
    md.process_id = j.at("process_id").get<std::string>();
    for (const auto& [name, info] : j.at("backends").items()) md.backends[name] = FromBytes(info);
    for (const auto& jr : j.at("regions")) {
      RegionMetadata r;
      r.addr = jr.at("addr").get<uint64_t>();
      r.len = jr.at("len").get<uint64_t>();
      int kind = jr.at("kind").get<int>();
      if (kind != 0 && kind != 1) return Err(StatusCode::kDataLoss, "agent metadata: memory kind {}", kind);
      r.kind = static_cast<MemoryKind>(kind);
      r.device_id = jr.at("device_id").get<int32_t>();
      for (const auto& [name, blob] : jr.at("backend_info").items()) r.backend_info[name] = FromBytes(blob);
      md.regions.push_back(std::move(r));
    }
    if (md.name.empty()) return Err(StatusCode::kDataLoss, "agent metadata without a name");
    return md;
  } catch (const json::exception& e) {
    return Err(StatusCode::kDataLoss, "agent metadata: {}", e.what());
  }
}

}  // namespace tandem::transfer
