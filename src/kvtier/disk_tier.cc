#include "kvtier/disk_tier.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/log_limiter.h"
#include "common/logging.h"

namespace tandem::kvtier {

namespace {

constexpr size_t kPage = 4096;
constexpr char kFileMagic[8] = {'T', 'K', 'V', 'S', 'L', 'A', 'B', '1'};
constexpr char kSlotMagic[8] = {'T', 'K', 'V', 'B', 'L', 'O', 'C', 'K'};
constexpr uint32_t kVersion = 1;
constexpr int kMaxSlabs = 64;

// At offset 0, in a page of its own.
struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t fingerprint_len;  // of the full fingerprint; `fingerprint` holds its first 1023 bytes
  uint64_t fingerprint_hash;
  uint64_t slot_bytes;
  uint64_t stride;
  uint64_t num_slots;
  char fingerprint[1024];
  uint64_t checksum;  // XXH3 of the bytes above
};
// At each slot's offset, in a page of its own; the block's bytes follow.
struct SlotHeader {
  char magic[8];
  uint64_t hash;
  uint64_t parent;
  uint64_t checksum;    // XXH3 of the block's bytes
  uint64_t data_bytes;
  uint64_t sequence;    // later writes have larger numbers
  uint64_t header_checksum;  // XXH3 of the bytes above
};
static_assert(sizeof(FileHeader) <= kPage && sizeof(SlotHeader) <= kPage);

size_t RoundUp(size_t n, size_t a) { return (n + a - 1) / a * a; }
bool PageAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kPage == 0; }
double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

LogLimiter& WriteErrors() {
  static LogLimiter l;
  return l;
}
LogLimiter& ReadErrors() {
  static LogLimiter l;
  return l;
}

}  // namespace

DiskKvTier::DiskKvTier(const DiskTierConfig& config, DiskIo io) : config_(config), io_(std::move(io)) {
  if (!io_.pwrite) io_.pwrite = [](int fd, const void* b, size_t n, off_t o) { return ::pwrite(fd, b, n, o); };
  if (!io_.pread) io_.pread = [](int fd, void* b, size_t n, off_t o) { return ::pread(fd, b, n, o); };
  if (!io_.fallocate) io_.fallocate = [](int fd, off_t len) { return ::fallocate(fd, 0, 0, len); };
}

std::unique_ptr<DiskKvTier> DiskKvTier::Open(const DiskTierConfig& config, std::string* why_not,
                                             DiskIo io) {
  std::unique_ptr<DiskKvTier> t(new DiskKvTier(config, std::move(io)));
  std::string why;
  if (!t->Init(&why)) {
    if (why_not != nullptr) *why_not = why;
    return nullptr;
  }
  t->thread_ = std::thread([p = t.get()] { p->Run(); });
  return t;
}

DiskKvTier::~DiskKvTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (fd_direct_ >= 0) ::close(fd_direct_);
  if (fd_ >= 0) ::close(fd_);
  std::free(header_buf_);
}

off_t DiskKvTier::SlotOffset(int slot) const {
  return static_cast<off_t>(kPage + static_cast<size_t>(slot) * stride_);
}

bool DiskKvTier::Init(std::string* why_not) {
  stride_ = RoundUp(kPage + config_.slot_bytes, kPage);
  const size_t slots = config_.slot_bytes == 0 ? 0 : config_.capacity_bytes / stride_;
  if (slots == 0) {
    *why_not = "the capacity holds no block of " + std::to_string(config_.slot_bytes) + " bytes";
    return false;
  }
  if (slots > kDiskTierMaxSlots) {
    *why_not = "the capacity holds " + std::to_string(slots) + " blocks, more than the " +
               std::to_string(kDiskTierMaxSlots) + " the tier indexes";
    return false;
  }
  num_slots_ = static_cast<int>(slots);
  std::error_code ec;
  std::filesystem::create_directories(config_.dir, ec);
  if (ec) {
    *why_not = "cannot create " + config_.dir + ": " + ec.message();
    return false;
  }
  // One slab per process: the first file no other process holds (workers sharing a directory get
  // a file each; a restarted worker takes one back).
  for (int i = 0; i < kMaxSlabs && fd_ < 0; ++i) {
    path_ = (std::filesystem::path(config_.dir) /
             (i == 0 ? std::string("tandem-kv.slab") : "tandem-kv." + std::to_string(i) + ".slab"))
                .string();
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      *why_not = "cannot open " + path_ + ": " + std::strerror(errno);
      if (errno == EACCES && std::filesystem::exists(path_)) continue;  // another user's: the next
      return false;
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  if (fd_ < 0) {
    if (why_not->empty()) {
      *why_not = "every one of the " + std::to_string(kMaxSlabs) + " slab files in " + config_.dir +
                 " is in use by another process";
    }
    return false;
  }
  why_not->clear();
  fd_direct_ = ::open(path_.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);  // -1 where unsupported
  header_buf_ = static_cast<std::byte*>(std::aligned_alloc(kPage, kPage));
  if (header_buf_ == nullptr) {
    *why_not = "out of memory";
    return false;
  }
  stats_.direct_io = fd_direct_ >= 0;
  stats_.capacity_blocks = num_slots_;
  slots_.resize(num_slots_);
  const off_t total = static_cast<off_t>(kPage + static_cast<size_t>(num_slots_) * stride_);

  // A matching file keeps its blocks.
  FileHeader want{};
  std::memcpy(want.magic, kFileMagic, sizeof(want.magic));
  want.version = kVersion;
  want.fingerprint_len = static_cast<uint32_t>(config_.fingerprint.size());
  want.fingerprint_hash = XXH3_64bits(config_.fingerprint.data(), config_.fingerprint.size());
  want.slot_bytes = config_.slot_bytes;
  want.stride = stride_;
  want.num_slots = static_cast<uint64_t>(num_slots_);
  std::memcpy(want.fingerprint, config_.fingerprint.data(),
              std::min(config_.fingerprint.size(), sizeof(want.fingerprint) - 1));
  want.checksum = XXH3_64bits(&want, offsetof(FileHeader, checksum));

  std::string mismatch;
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  FileHeader have{};
  if (size == 0) {
    mismatch = "";  // a new file
  } else if (::pread(fd_, &have, sizeof(have), 0) != static_cast<ssize_t>(sizeof(have)) ||
             std::memcmp(have.magic, kFileMagic, sizeof(have.magic)) != 0 ||
             have.checksum != XXH3_64bits(&have, offsetof(FileHeader, checksum))) {
    mismatch = "not a tandem KV slab (or a damaged header)";
  } else if (have.version != kVersion) {
    mismatch = "format version " + std::to_string(have.version);
  } else if (have.fingerprint_hash != want.fingerprint_hash) {
    mismatch = std::string("another model, dtype or KV layout (") +
               std::string(have.fingerprint, strnlen(have.fingerprint, sizeof(have.fingerprint))) + ")";
  } else if (have.slot_bytes != want.slot_bytes || have.num_slots != want.num_slots) {
    mismatch = "another size (" + std::to_string(have.num_slots) + " slots of " +
               std::to_string(have.slot_bytes) + " bytes)";
  } else if (size < total) {
    mismatch = "truncated";
  } else {
    Recover();
    log::info("kv offload: disk tier {}: {} blocks kept from an earlier run", path_, stats_.recovered);
    return true;
  }
  if (!mismatch.empty()) log::info("kv offload: disk tier {}: discarding its blocks: {}", path_, mismatch);
  if (::ftruncate(fd_, 0) != 0) {
    *why_not = "cannot truncate " + path_ + ": " + std::strerror(errno);
    return false;
  }
  // The whole size up front: a disk that cannot hold it refuses now, not mid-run.
  if (io_.fallocate(fd_, total) != 0) {
    const int err = errno;
    if (err != EOPNOTSUPP && err != ENOSYS) {
      *why_not = "cannot reserve " + std::to_string(total) + " bytes for " + path_ + ": " + std::strerror(err);
      if (::ftruncate(fd_, 0) != 0) {}  // give the space back; the error above stands
      return false;
    }
    if (::ftruncate(fd_, total) != 0) {
      *why_not = "cannot size " + path_ + ": " + std::strerror(errno);
      return false;
    }
  }
  std::memset(header_buf_, 0, kPage);
  std::memcpy(header_buf_, &want, sizeof(want));
  if (::pwrite(fd_, header_buf_, kPage, 0) != static_cast<ssize_t>(kPage)) {
    *why_not = "cannot write " + path_ + ": " + std::strerror(errno);
    return false;
  }
  for (int i = num_slots_; i-- > 0;) free_.push_back(i);
  return true;
}

void DiskKvTier::Recover() {
  SlotHeader h{};
  for (int i = 0; i < num_slots_; ++i) {
    const bool ok = ::pread(fd_, &h, sizeof(h), SlotOffset(i)) == static_cast<ssize_t>(sizeof(h)) &&
                    std::memcmp(h.magic, kSlotMagic, sizeof(h.magic)) == 0 &&
                    h.header_checksum == XXH3_64bits(&h, offsetof(SlotHeader, header_checksum)) &&
                    h.data_bytes == config_.slot_bytes;
    if (!ok) continue;
    auto [it, inserted] = index_.emplace(h.hash, i);
    if (!inserted) {  // the same block twice: keep the later write
      if (slots_[it->second].sequence > h.sequence) continue;
      slots_[it->second] = Slot{};
      it->second = i;
    }
    slots_[i] = Slot{h.hash, h.parent, h.checksum, h.sequence, true, {}};
    next_sequence_ = std::max(next_sequence_, h.sequence + 1);
  }
  std::vector<int> order;  // least recently written first
  for (int i = num_slots_; i-- > 0;) {
    if (slots_[i].used) order.push_back(i);
    else free_.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) { return slots_[a].sequence < slots_[b].sequence; });
  for (int i : order) slots_[i].lru_pos = lru_.insert(lru_.end(), i);
  stats_.recovered = index_.size();
}

bool DiskKvTier::Contains(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(hash) > 0;
}

std::optional<uint64_t> DiskKvTier::Parent(uint64_t hash) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  return slots_[it->second].parent;
}

bool DiskKvTier::QueueWrite(uint64_t hash, uint64_t parent, const std::byte* data, uint64_t token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || index_.count(hash) || queued_writes_.count(hash) ||
        queued_write_count_ >= config_.max_queued) {
      return false;
    }
    ops_.push_back(Op{OpKind::kWrite, hash, parent, token, data, nullptr});
    queued_writes_[hash] = 1;
    ++queued_write_count_;
    ++in_flight_;
  }
  cv_.notify_one();
  return true;
}

bool DiskKvTier::QueueRead(uint64_t hash, std::byte* dst, uint64_t token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || !index_.count(hash)) return false;
    // Reads go before queued writes: a request waits for them.
    auto pos = std::find_if(ops_.begin(), ops_.end(), [](const Op& o) { return o.kind == OpKind::kWrite; });
    ops_.insert(pos, Op{OpKind::kRead, hash, 0, token, nullptr, dst});
    ++in_flight_;
  }
  cv_.notify_one();
  return true;
}

std::vector<DiskKvTier::Completion> DiskKvTier::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(done_, {});
}

void DiskKvTier::WaitForCompletion(int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                    [&] { return !done_.empty() || in_flight_ == 0; });
}

int DiskKvTier::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

DiskTierStats DiskKvTier::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DiskTierStats s = stats_;
  s.blocks = static_cast<int64_t>(index_.size());
  return s;
}

void DiskKvTier::Run() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !ops_.empty(); });
      if (stop_) {  // what is still queued is a cache's work: dropped
        for (const Op& o : ops_) done_.push_back({o.kind, o.hash, o.token, false});
        in_flight_ = 0;
        ops_.clear();
        done_cv_.notify_all();
        return;
      }
      op = ops_.front();
      ops_.pop_front();
    }
    uint64_t evicted = 0;
    bool dropped = false;
    const bool ok = op.kind == OpKind::kWrite ? DoWrite(op, &evicted) : DoRead(op, &dropped);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (op.kind == OpKind::kWrite) {
        queued_writes_.erase(op.hash);
        --queued_write_count_;
      }
      --in_flight_;
      done_.push_back({op.kind, op.hash, op.token, ok, op.parent, evicted, dropped});
    }
    done_cv_.notify_all();
  }
}

std::vector<std::pair<uint64_t, uint64_t>> DiskKvTier::Blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(index_.size());
  for (const auto& [hash, slot] : index_) out.emplace_back(hash, slots_[slot].parent);
  return out;
}

void DiskKvTier::DropDirectIo() {
  log::info("kv offload: disk tier {}: O_DIRECT refused (EINVAL), using the page cache", path_);
  ::close(fd_direct_);
  fd_direct_ = -1;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.direct_io = false;
}

int DiskKvTier::TakeSlot(uint64_t* evicted) {
  if (!free_.empty()) {
    const int s = free_.back();
    free_.pop_back();
    return s;
  }
  if (lru_.empty() && !failed_.empty()) {
    const int s = failed_.back();
    failed_.pop_back();
    return s;
  }
  const int s = lru_.front();
  *evicted = slots_[s].hash;
  Forget(s);
  ++stats_.evicted;
  return s;
}

void DiskKvTier::Forget(int slot) {
  Slot& s = slots_[slot];
  if (!s.used) return;
  index_.erase(s.hash);
  lru_.erase(s.lru_pos);
  s = Slot{};
}

namespace {
// Whole-buffer pwrite / pread through `fn`, retried on EINTR and short counts. 0 or an errno.
template <typename Fn, typename Ptr>
int Transfer(const Fn& fn, int fd, Ptr buf, size_t n, off_t off) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = fn(fd, buf + done, n - done, off + static_cast<off_t>(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return EIO;  // end of file (a truncated slab) or a device that stopped taking bytes
    done += static_cast<size_t>(r);
  }
  return 0;
}
}  // namespace

bool DiskKvTier::DoWrite(const Op& op, uint64_t* evicted) {
  int slot;
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(op.hash)) return true;
    slot = TakeSlot(evicted);  // out of the index and the LRU list until written
    sequence = next_sequence_++;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = config_.slot_bytes;
  const bool direct = fd_direct_ >= 0 && PageAligned(op.src) && n % kPage == 0;
  auto pw = [this](int fd, const std::byte* b, size_t len, off_t off) { return io_.pwrite(fd, b, len, off); };
  int err = Transfer(pw, direct ? fd_direct_ : fd_, op.src, n, SlotOffset(slot) + static_cast<off_t>(kPage));
  if (err == EINVAL && direct) {  // the filesystem took O_DIRECT at open but refuses its I/O
    DropDirectIo();
    err = Transfer(pw, fd_, op.src, n, SlotOffset(slot) + static_cast<off_t>(kPage));
  }
  SlotHeader h{};
  if (err == 0) {
    std::memcpy(h.magic, kSlotMagic, sizeof(h.magic));
    h.hash = op.hash;
    h.parent = op.parent;
    h.checksum = XXH3_64bits(op.src, n);
    h.data_bytes = n;
    h.sequence = sequence;
    h.header_checksum = XXH3_64bits(&h, offsetof(SlotHeader, header_checksum));
    std::memset(header_buf_, 0, kPage);
    std::memcpy(header_buf_, &h, sizeof(h));
    err = Transfer(pw, fd_direct_ >= 0 ? fd_direct_ : fd_, header_buf_, kPage, SlotOffset(slot));
    if (err == EINVAL && fd_direct_ >= 0) {
      DropDirectIo();
      err = Transfer(pw, fd_, header_buf_, kPage, SlotOffset(slot));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (err != 0) {
    // Last in line (TakeSlot): on a sparse slab that the disk can no longer back, the same slot
    // would fail again, while slots whose blocks the disk already holds take writes.
    failed_.push_back(slot);
    ++stats_.write_errors;
    uint64_t quiet = 0;
    if (WriteErrors().ShouldLog(&quiet)) {
      log::warn("kv offload: disk tier {}: writing a block failed: {} ({} more failures since the last line)",
                path_, std::strerror(err), quiet);
    }
    return false;
  }
  Slot& s = slots_[slot];
  s = Slot{op.hash, op.parent, h.checksum, sequence, true, {}};
  s.lru_pos = lru_.insert(lru_.end(), slot);
  index_[op.hash] = slot;
  ++stats_.written_blocks;
  stats_.written_bytes += n;
  stats_.write_seconds += Since(t0);
  return true;
}

bool DiskKvTier::DoRead(const Op& op, bool* dropped) {
  int slot;
  uint64_t checksum;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(op.hash);
    if (it == index_.end()) return false;  // overwritten since it was queued
    slot = it->second;
    checksum = slots_[slot].checksum;
    lru_.splice(lru_.end(), lru_, slots_[slot].lru_pos);  // most recently used
  }
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = config_.slot_bytes;
  auto pr = [this](int fd, std::byte* b, size_t len, off_t off) { return io_.pread(fd, b, len, off); };
  const char* what = nullptr;
  int err = Transfer(pr, fd_direct_ >= 0 ? fd_direct_ : fd_, header_buf_, kPage, SlotOffset(slot));
  if (err == EINVAL && fd_direct_ >= 0) {
    DropDirectIo();
    err = Transfer(pr, fd_, header_buf_, kPage, SlotOffset(slot));
  }
  SlotHeader h{};
  if (err == 0) {
    std::memcpy(&h, header_buf_, sizeof(h));
    if (std::memcmp(h.magic, kSlotMagic, sizeof(h.magic)) != 0 ||
        h.header_checksum != XXH3_64bits(&h, offsetof(SlotHeader, header_checksum)) ||
        h.hash != op.hash || h.data_bytes != n || h.checksum != checksum) {
      what = "its header does not match";
    }
  }
  if (err == 0 && what == nullptr) {
    const bool direct = fd_direct_ >= 0 && PageAligned(op.dst) && n % kPage == 0;
    err = Transfer(pr, direct ? fd_direct_ : fd_, op.dst, n, SlotOffset(slot) + static_cast<off_t>(kPage));
    if (err == EINVAL && direct) {
      DropDirectIo();
      err = Transfer(pr, fd_, op.dst, n, SlotOffset(slot) + static_cast<off_t>(kPage));
    }
    if (err == 0 && XXH3_64bits(op.dst, n) != checksum) what = "its bytes do not match their checksum";
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (err != 0 || what != nullptr) {
    Forget(slot);
    free_.push_back(slot);
    *dropped = true;
    ++stats_.corrupt;
    uint64_t quiet = 0;
    if (ReadErrors().ShouldLog(&quiet)) {
      log::warn("kv offload: disk tier {}: block {:016x} dropped: {} ({} more since the last line)", path_,
                op.hash, err != 0 ? std::strerror(err) : what, quiet);
    }
    return false;
  }
  ++stats_.read_blocks;
  stats_.read_bytes += n;
  stats_.read_seconds += Since(t0);
  return true;
}

}  // namespace tandem::kvtier
