// ZeroedPages: zero-filled, writable, moved without copying, and resident only where touched (the
// CPU runner's KV pool sized for max_model_len costs memory for the tokens cached; issue 29).
#include "common/zeroed_pages.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace tandem {
namespace {

// Resident set of this process in bytes (/proc/self/statm, second field, pages).
size_t ResidentBytes() {
  std::ifstream f("/proc/self/statm");
  size_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(ZeroedPages, ZeroFilledAndResidentOnlyWhereWritten) {
  constexpr size_t kBytes = size_t{256} << 20;
  const size_t before = ResidentBytes();
  auto pages = ZeroedPages::Allocate(kBytes);
  ASSERT_TRUE(pages.ok()) << pages.status().ToString();
  ASSERT_EQ(pages->size(), kBytes);
  auto* p = static_cast<volatile uint8_t*>(pages->data());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pages->data()) % 4096, 0u);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Zeros (a page in 1024 read: some kernels commit a page on its first read, not only its first write).
  uint64_t sum = 0;
  for (size_t i = 0; i < kBytes; i += 1024 * page) sum += p[i] + p[i + page - 1];
  EXPECT_EQ(sum, 0u);
  for (size_t i = 0; i < (size_t{4} << 20); i += page) p[i] = 1;  // 4 MiB written
  const size_t grown = ResidentBytes() - before;
  EXPECT_GE(grown, size_t{4} << 20);
  EXPECT_LT(grown, size_t{32} << 20) << "the 252 MiB never touched must not be resident";

  ZeroedPages moved = std::move(pages).value();
  EXPECT_EQ(moved.size(), kBytes);
  EXPECT_EQ(static_cast<uint8_t*>(moved.data())[0], 1);
  ZeroedPages other;
  other = std::move(moved);
  EXPECT_EQ(moved.data(), nullptr);
  EXPECT_EQ(other.size(), kBytes);
}

TEST(ZeroedPages, ZeroBytesIsAnError) {
  EXPECT_EQ(ZeroedPages::Allocate(0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tandem
