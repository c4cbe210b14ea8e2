#include "transfer/fabric_control.h"

#include <algorithm>
#include <cstring>

namespace tandem::transfer::rma {

namespace {

constexpr char kMagic[4] = {'T', 'R', 'M', 'A'};

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void Str(std::string_view s) {
    Put(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string Take() { return std::move(out_); }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  bool Str(std::string* s) {
    uint32_t n = 0;
    if (!Get(&n) || in_.size() < n) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool Bytes(void* p, size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool empty() const { return in_.empty(); }

 private:
  std::string_view in_;
};

}  // namespace

std::string EncodeControl(const ControlMessage& m) {
  Writer w;
  w.Raw(kMagic, 4);
  w.Put(kControlVersion);
  w.Put(static_cast<uint8_t>(m.type));
  w.Put(m.flags);
  w.Put(m.xfer_id);
  w.Put(static_cast<uint32_t>(m.status.code()));
  w.Str(m.status.message());
  w.Str(m.initiator);
  w.Str(m.initiator_instance);
  w.Str(m.reply_address);
  w.Str(m.target_instance);
  w.Put(static_cast<uint8_t>(m.op));
  w.Put(m.timeout_ms);
  w.Put(static_cast<uint8_t>(m.notification.has_value()));
  w.Str(m.notification.value_or(""));
  w.Put(static_cast<uint32_t>(m.bounds.size()));
  for (const Descriptor& d : m.bounds) {
    w.Put(d.addr);
    w.Put(d.len);
  }
  w.Put(static_cast<uint32_t>(m.push.size()));
  for (const PushSegment& p : m.push) {
    w.Put(p.target_addr);
    w.Put(p.initiator_addr);
    w.Put(p.len);
    w.Put(p.key);
  }
  w.Put(static_cast<uint32_t>(m.keys.size()));
  for (const std::string& k : m.keys) w.Str(k);
  return w.Take();
}

Result<ControlMessage> DecodeControl(std::string_view bytes) {
  Reader r(bytes);
  char magic[4];
  uint8_t version = 0, type = 0, op = 0, has_note = 0;
  uint32_t code = 0, num_bounds = 0;
  std::string message, note;
  ControlMessage m;
  if (!r.Bytes(magic, 4) || std::memcmp(magic, kMagic, 4) != 0) {
    return Err(StatusCode::kDataLoss, "rma control: not a control message");
  }
  if (!r.Get(&version) || version != kControlVersion) {
    return Err(StatusCode::kDataLoss, "rma control: version {} (expected {})", version, kControlVersion);
  }
  bool ok = r.Get(&type) && r.Get(&m.flags) && r.Get(&m.xfer_id) && r.Get(&code) && r.Str(&message) &&
            r.Str(&m.initiator) && r.Str(&m.initiator_instance) && r.Str(&m.reply_address) &&
            r.Str(&m.target_instance) && r.Get(&op) && r.Get(&m.timeout_ms) && r.Get(&has_note) && r.Str(&note) &&
            r.Get(&num_bounds);
  if (!ok || type < 1 || type > 5 || op > 1 || code > static_cast<uint32_t>(StatusCode::kInternal) ||
      num_bounds > bytes.size() / 16) {
    return Err(StatusCode::kDataLoss, "rma control: malformed message");
  }
  m.type = static_cast<ControlType>(type);
  m.op = static_cast<Op>(op);
  m.status = code == 0 ? Status::Ok() : Status(static_cast<StatusCode>(code), std::move(message));
  if (has_note) m.notification = std::move(note);
  m.bounds.resize(num_bounds);
  for (Descriptor& d : m.bounds) {
    if (!r.Get(&d.addr) || !r.Get(&d.len)) return Err(StatusCode::kDataLoss, "rma control: truncated bounds");
  }
  uint32_t num_push = 0, num_keys = 0;
  if (!r.Get(&num_push) || num_push > bytes.size() / 28) return Err(StatusCode::kDataLoss, "rma control: bad push");
  m.push.resize(num_push);
  for (PushSegment& p : m.push) {
    if (!r.Get(&p.target_addr) || !r.Get(&p.initiator_addr) || !r.Get(&p.len) || !r.Get(&p.key)) {
      return Err(StatusCode::kDataLoss, "rma control: truncated push");
    }
  }
  if (!r.Get(&num_keys) || num_keys > bytes.size() / 4) return Err(StatusCode::kDataLoss, "rma control: bad keys");
  m.keys.resize(num_keys);
  for (std::string& k : m.keys) {
    if (!r.Str(&k)) return Err(StatusCode::kDataLoss, "rma control: truncated keys");
  }
  for (const PushSegment& p : m.push) {
    if (p.key >= m.keys.size()) return Err(StatusCode::kDataLoss, "rma control: push key out of range");
  }
  if (!r.empty()) return Err(StatusCode::kDataLoss, "rma control: trailing bytes");
  return m;
}

ControlMessage ReplyTo(const ControlMessage& m, ControlType type, Status status) {
  ControlMessage r;
  r.type = type;
  r.xfer_id = m.xfer_id;
  r.status = std::move(status);
  r.initiator = m.initiator;
  r.initiator_instance = m.initiator_instance;
  r.target_instance = m.target_instance;
  r.op = m.op;
  return r;
}

Status GuardTable::Begin(const ControlMessage& m, std::chrono::steady_clock::time_point now) {
  if (m.bounds.empty()) return Err(StatusCode::kInvalidArgument, "rma control: a transfer without ranges");
  TANDEM_ASSIGN_OR_RETURN(RegionPin pin, host_.PinRegistered(MemoryKind::kHost, m.bounds));
  Guard g{std::move(pin), now + std::chrono::milliseconds(m.timeout_ms) + std::chrono::milliseconds(kGuardGraceMs)};
  pins_.insert_or_assign({m.initiator_instance, m.xfer_id}, std::move(g));
  return Status::Ok();
}

bool GuardTable::End(const ControlMessage& m) { return pins_.erase({m.initiator_instance, m.xfer_id}) > 0; }

size_t GuardTable::Expire(std::chrono::steady_clock::time_point now) {
  return std::erase_if(pins_, [&](const auto& kv) { return kv.second.expiry <= now; });
}

int FindSpan(const std::vector<RegionSpan>& regions, uint64_t addr, uint64_t len, int hint) {
  auto inside = [&](const RegionSpan& r) {
    return len > 0 && addr >= r.addr && addr - r.addr <= r.len && len <= r.len - (addr - r.addr);
  };
  if (hint >= 0 && hint < static_cast<int>(regions.size()) && inside(regions[hint])) return hint;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (inside(regions[i])) return static_cast<int>(i);
  }
  return -1;
}

Result<std::vector<Descriptor>> BoundsOf(const std::vector<Segment>& segments, const std::vector<RegionSpan>& regions) {
  std::map<int, std::pair<uint64_t, uint64_t>> per_region;  // region index -> [lo, hi)
  int hint = -1;
  for (const Segment& s : segments) {
    hint = FindSpan(regions, s.remote_addr, s.len, hint);
    if (hint < 0) {
      return Err(StatusCode::kInvalidArgument, "remote range [{:#x}, +{}) is in no region of the peer", s.remote_addr,
                 s.len);
    }
    auto [pos, fresh] = per_region.try_emplace(hint, s.remote_addr, s.remote_addr + s.len);
    if (!fresh) {
      pos->second.first = std::min(pos->second.first, s.remote_addr);
      pos->second.second = std::max(pos->second.second, s.remote_addr + s.len);
    }
  }
  std::vector<Descriptor> out;
  for (const auto& [idx, range] : per_region) out.push_back({range.first, range.second - range.first, 0});
  return out;
}

}  // namespace tandem::transfer::rma
