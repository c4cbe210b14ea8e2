// DiskKvTier: KV blocks on a local disk, the tier below the host tier (issue 26; Dynamo KVBM's G3,
// LMCache's local disk backend, SGLang HiCache's storage). Blocks keep their chained hash (DESIGN.md
// section 4); every block carries an xxHash3 checksum, so a block that was torn, truncated or
// changed on disk is dropped when read, never served.
//
// Format: one slab file per process, `<dir>/tandem-kv.slab` (or `tandem-kv.N.slab` when another
// process holds that one: each file is locked with flock while open). A 4 KiB file header (magic, version, slot size,
// slot count, and the caller's layout fingerprint: model, dtype, KV layout) and then `num_slots`
// slots, each a 4 KiB slot header (magic, block hash, parent hash, data checksum, sequence number,
// the header's own checksum) followed by the block's bytes, padded to 4 KiB. A file whose header
// does not match (another model, dtype or layout, another size) is discarded and started afresh, with
// a log line; one that matches keeps its blocks across a restart (the slot headers are scanned at
// open). Data moves with O_DIRECT where the filesystem and the buffer's alignment allow, else
// through the page cache. The file gets its whole size at open (fallocate), so that a disk too small
// refuses then; where the filesystem cannot preallocate, the file is sparse and a full disk shows up
// as write errors instead.
//
// All I/O runs on the tier's own thread: QueueWrite / QueueRead return at once, and Poll hands back
// what finished. The caller keeps a queued write's source, and a queued read's destination, alive
// and untouched until its completion is polled. Write failures (a full disk, an I/O error) leave the
// block off the disk and are counted; a failed or mismatching read drops the block.
//
// Contains / Parent / Poll / stats are thread-safe; one thread (the engine's) queues.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace tandem::kvtier {

struct DiskTierConfig {
  std::string dir;            // created if missing
  size_t capacity_bytes = 0;  // slots = capacity_bytes / slot stride
  size_t slot_bytes = 0;      // one block of every layer (the host tier's slot)
  std::string fingerprint;    // model, dtype and KV layout; a mismatch discards the file
  int max_queued = 64;        // writes waiting at most (beyond: QueueWrite refuses)
};

struct DiskTierStats {
  int64_t blocks = 0, capacity_blocks = 0;
  uint64_t written_blocks = 0, written_bytes = 0;
  uint64_t read_blocks = 0, read_bytes = 0;
  double write_seconds = 0, read_seconds = 0;
  uint64_t write_errors = 0;   // writes that failed (ENOSPC, EIO ...): the block is not on disk
  uint64_t corrupt = 0;        // reads that failed or did not match their checksum: dropped
  uint64_t evicted = 0;        // blocks overwritten for room
  uint64_t recovered = 0;      // blocks found at open in a matching file
  bool direct_io = false;      // O_DIRECT in use
};

// The system calls the tier makes for block data (tests replace them to inject faults).
struct DiskIo {
  std::function<ssize_t(int fd, const void* buf, size_t n, off_t off)> pwrite;
  std::function<ssize_t(int fd, void* buf, size_t n, off_t off)> pread;
  std::function<int(int fd, off_t len)> fallocate;  // 0 or -1 with errno, as fallocate(2)
};

// Slots at most (the index lives in memory: about 50 bytes a slot).
inline constexpr size_t kDiskTierMaxSlots = size_t{1} << 23;

class DiskKvTier {
 public:
  enum class OpKind { kWrite, kRead };
  struct Completion {
    OpKind kind;
    uint64_t hash = 0;
    uint64_t token = 0;  // the caller's
    bool ok = false;
    uint64_t parent = 0;       // a write's
    uint64_t evicted = 0;      // a write's: the block it overwrote for room (0: none)
    bool dropped = false;      // a read's: the block failed its check and left the disk
  };

  // Opens (or creates) the slab file. nullptr with `why_not` set when the tier cannot work: the
  // directory cannot be created or written (read-only, permissions), the capacity holds no slot or
  // more than kDiskTierMaxSlots, or the file cannot be given its size (a full disk). Members of `io`
  // left empty: the real pwrite / pread / fallocate.
  static std::unique_ptr<DiskKvTier> Open(const DiskTierConfig& config, std::string* why_not,
                                          DiskIo io = {});
  ~DiskKvTier();
  DiskKvTier(const DiskKvTier&) = delete;
  DiskKvTier& operator=(const DiskKvTier&) = delete;

  bool Contains(uint64_t hash) const;
  std::optional<uint64_t> Parent(uint64_t hash) const;  // of a block on disk
  // Queues `slot_bytes` at `data` to be written as block `hash`. False (nothing queued) when the
  // block is on disk or queued already, or max_queued writes wait.
  bool QueueWrite(uint64_t hash, uint64_t parent, const std::byte* data, uint64_t token);
  // Queues a read of block `hash` into `dst` (slot_bytes), checked against its checksum. False
  // when the block is not on disk.
  bool QueueRead(uint64_t hash, std::byte* dst, uint64_t token);
  // Completions since the last call, in the order they happened.
  std::vector<Completion> Poll();
  // Waits until a completion is pending or `timeout_ms` passed.
  void WaitForCompletion(int timeout_ms);
  int in_flight() const;
  // Every block on disk now: (hash, parent).
  std::vector<std::pair<uint64_t, uint64_t>> Blocks() const;
  DiskTierStats stats() const;
  const std::string& path() const { return path_; }

 private:
  struct Op {
    OpKind kind;
    uint64_t hash = 0, parent = 0, token = 0;
    const std::byte* src = nullptr;
    std::byte* dst = nullptr;
  };
  struct Slot {
    uint64_t hash = 0, parent = 0, checksum = 0, sequence = 0;
    bool used = false;
    std::list<int>::iterator lru_pos;
  };

  DiskKvTier(const DiskTierConfig& config, DiskIo io);
  bool Init(std::string* why_not);
  void Recover();
  void Run();
  bool DoWrite(const Op& op, uint64_t* evicted);
  bool DoRead(const Op& op, bool* dropped);
  int TakeSlot(uint64_t* evicted);  // under mu_: a free slot or the least recently used
  void Forget(int slot);            // under mu_
  off_t SlotOffset(int slot) const;
  void DropDirectIo();  // I/O thread: O_DIRECT refused at I/O time; buffered from now on

  DiskTierConfig config_;
  DiskIo io_;
  std::string path_;
  int fd_ = -1;         // buffered
  int fd_direct_ = -1;  // O_DIRECT, or -1
  size_t stride_ = 0;   // slot header + data, 4 KiB multiple
  int num_slots_ = 0;
  uint64_t next_sequence_ = 1;
  std::byte* header_buf_ = nullptr;  // one aligned 4 KiB page, I/O thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;       // ops queued / stop
  std::condition_variable done_cv_;  // completions pending
  std::deque<Op> ops_;
  std::vector<Completion> done_;
  std::vector<Slot> slots_;
  std::vector<int> free_;
  // Slots whose last write failed: taken only when no free slot is left and no written block to
  // evict (on a sparse slab the disk can no longer back, the same slot fails again).
  std::vector<int> failed_;
  std::list<int> lru_;  // used slots, front = least recently used
  std::unordered_map<uint64_t, int> index_;
  std::unordered_map<uint64_t, int> queued_writes_;  // hash -> count (dedupe)
  int queued_write_count_ = 0;
  int in_flight_ = 0;
  DiskTierStats stats_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tandem::kvtier
