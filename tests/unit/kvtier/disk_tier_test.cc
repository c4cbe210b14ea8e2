// DiskKvTier (kvtier/disk_tier.h): blocks written and read back through a slab file, LRU eviction,
// restart with a matching or another fingerprint, and the faults issue 26 names: a corrupted block
// (dropped, never returned), a torn write, a full disk, a directory that cannot be written.
#include "kvtier/disk_tier.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tandem::kvtier {
namespace {

constexpr size_t kSlot = 8192;
constexpr size_t kStride = 4096 + kSlot;  // slot header page + data

class DiskKvTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tandem-disk-tier-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(dir_, ec);
  }
  DiskTierConfig Config(int slots, const std::string& fingerprint = "model-a bf16 L4") const {
    DiskTierConfig c;
    c.dir = dir_ + "/kv";
    c.capacity_bytes = slots * kStride;
    c.slot_bytes = kSlot;
    c.fingerprint = fingerprint;
    return c;
  }
  std::string SlabPath() const { return dir_ + "/kv/tandem-kv.slab"; }

  std::string dir_;
};

std::vector<std::byte> Block(unsigned char seed) {
  std::vector<std::byte> b(kSlot);
  for (size_t i = 0; i < kSlot; ++i) b[i] = std::byte(static_cast<unsigned char>(seed * 31 + i * 7));
  return b;
}

// Polls until `n` completions arrived (bounded: 10 s).
std::vector<DiskKvTier::Completion> Await(DiskKvTier& t, size_t n) {
  std::vector<DiskKvTier::Completion> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    t.WaitForCompletion(50);
    for (const auto& c : t.Poll()) got.push_back(c);
  }
  return got;
}

void Write(DiskKvTier& t, uint64_t hash, const std::vector<std::byte>& data, uint64_t parent = 0) {
  ASSERT_TRUE(t.QueueWrite(hash, parent, data.data(), hash));
  auto c = Await(t, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(c[0].ok) << hash;
  EXPECT_EQ(c[0].kind, DiskKvTier::OpKind::kWrite);
}

// Reads `hash`; true and the bytes when it came back intact.
bool Read(DiskKvTier& t, uint64_t hash, std::vector<std::byte>* out) {
  out->assign(kSlot, std::byte{0});
  if (!t.QueueRead(hash, out->data(), 7)) return false;
  auto c = Await(t, 1);
  return c.size() == 1 && c[0].ok && c[0].token == 7 && c[0].kind == DiskKvTier::OpKind::kRead;
}

void FlipByte(const std::string& path, off_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good());
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  f.seekp(at);
  f.write(&c, 1);
}

TEST_F(DiskKvTierTest, WritesAndReadsBlocksBackWithTheirParent) {
  std::string why;
  auto t = DiskKvTier::Open(Config(4), &why);
  ASSERT_TRUE(t) << why;
  const auto a = Block(1), b = Block(2);
  Write(*t, 11, a);
  Write(*t, 22, b, 11);
  EXPECT_TRUE(t->Contains(11));
  EXPECT_TRUE(t->Contains(22));
  EXPECT_FALSE(t->Contains(33));
  EXPECT_EQ(t->Parent(22), 11u);
  std::vector<std::byte> got;
  ASSERT_TRUE(Read(*t, 22, &got));
  EXPECT_EQ(got, b);
  ASSERT_TRUE(Read(*t, 11, &got));
  EXPECT_EQ(got, a);
  EXPECT_FALSE(t->QueueRead(33, got.data(), 0));
  EXPECT_FALSE(t->QueueWrite(11, 0, a.data(), 0));  // on disk already
  const DiskTierStats s = t->stats();
  EXPECT_EQ(s.blocks, 2);
  EXPECT_EQ(s.capacity_blocks, 4);
  EXPECT_EQ(s.written_blocks, 2u);
  EXPECT_EQ(s.read_blocks, 2u);
  EXPECT_EQ(s.written_bytes, 2 * kSlot);
}

TEST_F(DiskKvTierTest, TwoTiersSharingADirectoryTakeAFileEach) {
  std::string why;
  auto a = DiskKvTier::Open(Config(4), &why);
  ASSERT_TRUE(a) << why;
  auto b = DiskKvTier::Open(Config(4), &why);
  ASSERT_TRUE(b) << why;
  EXPECT_NE(a->path(), b->path());
  Write(*a, 1, Block(1));
  Write(*b, 2, Block(2));
  EXPECT_FALSE(a->Contains(2));
  EXPECT_FALSE(b->Contains(1));
  const std::string b_path = b->path();
  b.reset();
  auto c = DiskKvTier::Open(Config(4), &why);  // takes b's file back, with its block
  ASSERT_TRUE(c) << why;
  EXPECT_EQ(c->path(), b_path);
  EXPECT_TRUE(c->Contains(2));
}

TEST_F(DiskKvTierTest, TheLeastRecentlyUsedBlockMakesRoom) {
  std::string why;
  auto t = DiskKvTier::Open(Config(2), &why);
  ASSERT_TRUE(t) << why;
  Write(*t, 1, Block(1));
  Write(*t, 2, Block(2));
  std::vector<std::byte> got;
  ASSERT_TRUE(Read(*t, 1, &got));  // 1 is now the most recently used
  Write(*t, 3, Block(3));
  EXPECT_TRUE(t->Contains(1));
  EXPECT_FALSE(t->Contains(2));
  EXPECT_TRUE(t->Contains(3));
  EXPECT_EQ(t->stats().evicted, 1u);
  ASSERT_TRUE(Read(*t, 3, &got));
  EXPECT_EQ(got, Block(3));
}

TEST_F(DiskKvTierTest, BlocksSurviveARestartWithTheSameFingerprintOnly) {
  std::string why;
  {
    auto t = DiskKvTier::Open(Config(4), &why);
    ASSERT_TRUE(t) << why;
    Write(*t, 5, Block(5));
    Write(*t, 6, Block(6), 5);
  }
  {
    auto t = DiskKvTier::Open(Config(4), &why);
    ASSERT_TRUE(t) << why;
    EXPECT_EQ(t->stats().recovered, 2u);
    EXPECT_EQ(t->Parent(6), 5u);
    std::vector<std::byte> got;
    ASSERT_TRUE(Read(*t, 6, &got));
    EXPECT_EQ(got, Block(6));
  }
  // Another model (or dtype, or layout): the file is started afresh.
  auto other = DiskKvTier::Open(Config(4, "model-b bf16 L4"), &why);
  ASSERT_TRUE(other) << why;
  EXPECT_EQ(other->stats().recovered, 0u);
  EXPECT_FALSE(other->Contains(5));
  // Another size too.
  other.reset();
  auto bigger = DiskKvTier::Open(Config(8, "model-b bf16 L4"), &why);
  ASSERT_TRUE(bigger) << why;
  EXPECT_EQ(bigger->stats().capacity_blocks, 8);
  EXPECT_EQ(bigger->stats().recovered, 0u);
}

TEST_F(DiskKvTierTest, ACorruptedBlockIsDroppedNotReturned) {
  std::string why;
  {
    auto t = DiskKvTier::Open(Config(4), &why);
    ASSERT_TRUE(t) << why;
    Write(*t, 9, Block(9));
    Write(*t, 10, Block(10));
  }
  // One byte of the first slot's data changes on disk (slot 0 is the first one written).
  FlipByte(SlabPath(), 4096 + 4096 + 100);
  auto t = DiskKvTier::Open(Config(4), &why);
  ASSERT_TRUE(t) << why;
  ASSERT_TRUE(t->Contains(9));  // its header is intact
  std::vector<std::byte> got;
  EXPECT_FALSE(Read(*t, 9, &got));
  EXPECT_FALSE(t->Contains(9));
  EXPECT_EQ(t->stats().corrupt, 1u);
  ASSERT_TRUE(Read(*t, 10, &got));  // the other block is untouched
  EXPECT_EQ(got, Block(10));
}

TEST_F(DiskKvTierTest, ADamagedSlotHeaderOrATruncatedFileIsNotRecovered) {
  std::string why;
  {
    auto t = DiskKvTier::Open(Config(4), &why);
    ASSERT_TRUE(t) << why;
    Write(*t, 1, Block(1));
    Write(*t, 2, Block(2));
  }
  FlipByte(SlabPath(), 4096 + 12);  // slot 0's header
  {
    auto t = DiskKvTier::Open(Config(4), &why);
    ASSERT_TRUE(t) << why;
    EXPECT_FALSE(t->Contains(1));
    EXPECT_TRUE(t->Contains(2));
  }
  ASSERT_EQ(::truncate(SlabPath().c_str(), 4096 + kStride), 0);
  auto t = DiskKvTier::Open(Config(4), &why);
  ASSERT_TRUE(t) << why;
  EXPECT_EQ(t->stats().recovered, 0u);
  EXPECT_FALSE(t->Contains(2));
}

TEST_F(DiskKvTierTest, AWriteThatFailsLeavesTheBlockOffTheDisk) {
  // A full disk mid-run: every pwrite of block data fails with ENOSPC.
  DiskIo io;
  io.pwrite = [](int, const void*, size_t, off_t) -> ssize_t {
    errno = ENOSPC;
    return -1;
  };
  std::string why;
  auto t = DiskKvTier::Open(Config(4), &why, io);
  ASSERT_TRUE(t) << why;
  const auto a = Block(1);
  ASSERT_TRUE(t->QueueWrite(1, 0, a.data(), 1));
  auto c = Await(*t, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_FALSE(c[0].ok);
  EXPECT_FALSE(t->Contains(1));
  EXPECT_EQ(t->stats().write_errors, 1u);
  EXPECT_EQ(t->stats().blocks, 0);
}

TEST_F(DiskKvTierTest, ASlotWhoseWriteFailedIsTriedLastSoOtherSlotsTakeTheNextWrites) {
  // A sparse slab on a full disk: slot 0's data (at 4096 + 4096) has no blocks behind it; the
  // other slots were written before the disk filled. The first write takes slot 0 and fails.
  DiskIo io;
  io.pwrite = [](int fd, const void* b, size_t n, off_t off) -> ssize_t {
    if (off == 4096 + 4096) {
      errno = ENOSPC;
      return -1;
    }
    return ::pwrite(fd, b, n, off);
  };
  std::string why;
  auto t = DiskKvTier::Open(Config(4), &why, io);
  ASSERT_TRUE(t) << why;
  const auto a = Block(1), b = Block(2), c = Block(3);
  ASSERT_TRUE(t->QueueWrite(1, 0, a.data(), 1));
  ASSERT_EQ(Await(*t, 1).size(), 1u);
  ASSERT_TRUE(t->QueueWrite(2, 1, b.data(), 2));
  ASSERT_TRUE(t->QueueWrite(3, 2, c.data(), 3));
  const auto done = Await(*t, 2);
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].ok && done[1].ok);
  EXPECT_FALSE(t->Contains(1));
  EXPECT_TRUE(t->Contains(2));
  EXPECT_TRUE(t->Contains(3));
  EXPECT_EQ(t->stats().write_errors, 1u);
  EXPECT_EQ(t->stats().blocks, 2);
  // Slot 3 takes block 4; then no slot is free and block 5 evicts the least recently used block
  // (2) instead of trying slot 0 again.
  const auto d = Block(4), e = Block(5);
  ASSERT_TRUE(t->QueueWrite(4, 3, d.data(), 4));
  ASSERT_EQ(Await(*t, 1).size(), 1u);
  ASSERT_TRUE(t->QueueWrite(5, 4, e.data(), 5));
  const auto last = Await(*t, 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_TRUE(last[0].ok);
  EXPECT_TRUE(t->Contains(5));
  EXPECT_FALSE(t->Contains(2));
  EXPECT_EQ(t->stats().write_errors, 1u);
  EXPECT_EQ(t->stats().blocks, 3);
}

TEST_F(DiskKvTierTest, ATornWriteIsNotRecoveredAfterACrash) {
  // The block's bytes land but its header does not (the process died between the two).
  int calls = 0;
  DiskIo io;
  io.pwrite = [&calls](int fd, const void* b, size_t n, off_t off) -> ssize_t {
    if (++calls == 2) {
      errno = EIO;
      return -1;
    }
    return ::pwrite(fd, b, n, off);
  };
  std::string why;
  {
    auto t = DiskKvTier::Open(Config(4), &why, io);
    ASSERT_TRUE(t) << why;
    const auto a = Block(3);
    ASSERT_TRUE(t->QueueWrite(3, 0, a.data(), 3));
    ASSERT_EQ(Await(*t, 1).size(), 1u);
    EXPECT_FALSE(t->Contains(3));
  }
  auto t = DiskKvTier::Open(Config(4), &why);
  ASSERT_TRUE(t) << why;
  EXPECT_FALSE(t->Contains(3));
  EXPECT_EQ(t->stats().recovered, 0u);
}

TEST_F(DiskKvTierTest, ADirectoryThatCannotBeWrittenOrASizeThatDoesNotFitTurnsTheTierOff) {
  std::string why;
  // A path below a regular file can never be a directory.
  const std::string file = dir_ + "/plain";
  std::ofstream(file) << "x";
  DiskTierConfig c = Config(4);
  c.dir = file + "/kv";
  EXPECT_EQ(DiskKvTier::Open(c, &why), nullptr);
  EXPECT_NE(why.find("cannot create"), std::string::npos) << why;
  // A read-only directory (for a user without CAP_DAC_OVERRIDE).
  if (::geteuid() != 0) {
    const std::string ro = dir_ + "/ro";
    ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
    c.dir = ro;
    why.clear();
    EXPECT_EQ(DiskKvTier::Open(c, &why), nullptr);
    EXPECT_NE(why.find("cannot open"), std::string::npos) << why;
  }
  // More than the disk holds: refused at open, not mid-run.
  DiskIo full;
  full.fallocate = [](int, off_t) {
    errno = ENOSPC;
    return -1;
  };
  why.clear();
  EXPECT_EQ(DiskKvTier::Open(Config(4), &why, full), nullptr);
  EXPECT_NE(why.find("No space left"), std::string::npos) << why;
  // More blocks than the tier indexes.
  c = Config(4);
  c.capacity_bytes = size_t{1} << 52;  // 4 PiB
  why.clear();
  EXPECT_EQ(DiskKvTier::Open(c, &why), nullptr);
  EXPECT_NE(why.find("more than"), std::string::npos) << why;
  // Less than one block.
  c = Config(4);
  c.capacity_bytes = kSlot;
  why.clear();
  EXPECT_EQ(DiskKvTier::Open(c, &why), nullptr);
  EXPECT_NE(why.find("no block"), std::string::npos) << why;
}

}  // namespace
}  // namespace tandem::kvtier
