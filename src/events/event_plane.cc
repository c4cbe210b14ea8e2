#include "events/event_plane.h"

#include <cstring>


namespace tandem::runtime {
namespace {

constexpr uint8_t kFrameVersion = 1;

void PutLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetLe(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[at + i])) << (8 * i);
  return v;
}

}  // namespace

std::string KvEventsSubject(const std::string& namespace_name) {
  return namespace_name + ".kv_events";
}

bool ValidSubject(const std::string& subject) {
  if (subject.empty() || subject.front() == '.' || subject.back() == '.') return false;
  for (char c : subject) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return subject.find("..") == std::string::npos;
}

std::string EncodeEventFrame(const std::string& worker_id, uint64_t sequence,
                             std::string_view payload) {
  std::string out;
  out.reserve(11 + worker_id.size() + payload.size());
  out.push_back(static_cast<char>(kFrameVersion));
  PutLe(&out, worker_id.size(), 2);
  out += worker_id;
  PutLe(&out, sequence, 8);
  out.append(payload.data(), payload.size());
  return out;
}

Result<Event> DecodeEventFrame(const std::string& subject, std::string_view frame) {
  if (frame.size() < 3 || static_cast<uint8_t>(frame[0]) != kFrameVersion) {
    return Err(StatusCode::kDataLoss, "event frame on {}: unknown version or too short ({} bytes)",
               subject, frame.size());
  }
  const size_t id_len = GetLe(frame, 1, 2);
  if (frame.size() < 3 + id_len + 8) {
    return Err(StatusCode::kDataLoss, "event frame on {}: truncated ({} bytes)", subject,
               frame.size());
  }
  Event e;
  e.subject = subject;
  e.worker_id = std::string(frame.substr(3, id_len));
  e.sequence = GetLe(frame, 3 + id_len, 8);
  e.payload = std::string(frame.substr(3 + id_len + 8));
  return e;
}

std::optional<EventGap> GapDetector::Check(const Event& event) {
  uint64_t& last = last_[event.worker_id];
  const uint64_t expected = last + 1;
  last = event.sequence;
  if (event.sequence == expected) return std::nullopt;
  return EventGap{event.subject, event.worker_id, expected, event.sequence};
}

uint64_t GapDetector::Last(const std::string& worker_id) const {
  auto it = last_.find(worker_id);
  return it == last_.end() ? 0 : it->second;
}

Status ValidateEventPlaneUrl(const std::string& url) {
  if (url.empty() || url == "embedded") return Status::Ok();
  if (url.rfind("nats://", 0) == 0) {
#ifdef TANDEM_HAVE_NATS
    if (url.size() > 7) return Status::Ok();
#else
    return Err(StatusCode::kInvalidArgument,
               "--event-plane {}: this tandem was built without libnats (install libnats-dev and "
               "rebuild)", url);
#endif
  }
  return Err(StatusCode::kInvalidArgument,
             "--event-plane {}: expected 'embedded' or nats://host:port", url);
}

}  // namespace tandem::runtime
