// reshape_and_cache layout and paged attention (sgemm tiles) against the plain-loop version and
// against dense causal attention on contiguous K/V; split by KV head and query chunk (as the CPU
// runner's threads run it), bit for bit the same.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/reshape_and_cache.h"

namespace tandem::cpu {
namespace {

TEST(ReshapeAndCacheTest, Layout) {
  const int blocks = 3, bs = 4, kvh = 2, d = 3;
  std::vector<float> pool(blocks * 2 * bs * kvh * d, 0.0f);
  std::vector<float> k(2 * kvh * d), v(2 * kvh * d);
  std::iota(k.begin(), k.end(), 1.0f);
  std::iota(v.begin(), v.end(), 100.0f);
  const std::vector<int64_t> slots = {2 * bs + 1, 0 * bs + 3};  // block 2 slot 1, block 0 slot 3
  ReshapeAndCache(k.data(), v.data(), 2, slots.data(), bs, kvh, d, pool.data());
  auto at = [&](int block, int kv, int slot, int h, int e) {
    return pool[(((block * 2 + kv) * bs + slot) * kvh + h) * d + e];
  };
  for (int h = 0; h < kvh; ++h) {
    for (int e = 0; e < d; ++e) {
      EXPECT_EQ(at(2, 0, 1, h, e), k[h * d + e]);
      EXPECT_EQ(at(2, 1, 1, h, e), v[h * d + e]);
      EXPECT_EQ(at(0, 0, 3, h, e), k[kvh * d + h * d + e]);
      EXPECT_EQ(at(0, 1, 3, h, e), v[kvh * d + h * d + e]);
    }
  }
  EXPECT_EQ(std::count(pool.begin(), pool.end(), 0.0f), long(pool.size() - 4 * kvh * d));
}

struct Case {
  int start_pos, num_tokens, block_size, num_heads, num_kv_heads, head_dim;
};

TEST(PagedAttentionTest, MatchesNaiveAndDense) {
  const Case cases[] = {{0, 1, 16, 4, 2, 64},   {0, 37, 16, 4, 2, 64}, {5, 1, 1, 2, 2, 8},
                        {20, 9, 7, 8, 1, 16},   {0, 300, 16, 4, 2, 32}, {130, 140, 3, 4, 4, 8}};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const Case& c : cases) {
    const int ctx = c.start_pos + c.num_tokens;
    const int nblk = (ctx + c.block_size - 1) / c.block_size;
    const int pool_blocks = nblk + 3;
    std::vector<int32_t> table(pool_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    table.resize(nblk);
    const long kv_row = long(c.num_kv_heads) * c.head_dim;
    std::vector<float> pool(size_t(pool_blocks) * 2 * c.block_size * kv_row, 0.0f);
    std::vector<float> k(ctx * kv_row), v(ctx * kv_row), q(size_t(c.num_tokens) * c.num_heads * c.head_dim);
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    for (float& x : q) x = 2.0f * nd(rng);
    std::vector<int64_t> slots(ctx);
    for (int p = 0; p < ctx; ++p) slots[p] = int64_t(table[p / c.block_size]) * c.block_size + p % c.block_size;
    ReshapeAndCache(k.data(), v.data(), ctx, slots.data(), c.block_size, c.num_kv_heads, c.head_dim, pool.data());

    PagedAttentionArgs a;
    a.q = q.data();
    a.num_tokens = c.num_tokens;
    a.start_pos = c.start_pos;
    a.kv_pool = pool.data();
    a.block_table = table.data();
    a.block_size = c.block_size;
    a.num_heads = c.num_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.scale = 1.0f / std::sqrt(float(c.head_dim));
    std::vector<float> fast(q.size()), naive(q.size());
    a.out = fast.data();
    PagedAttention(a);
    // As the CPU runner splits it for its threads: one KV head and 128 query tokens a call.
    std::vector<float> split(q.size(), NAN);
    for (int h = 0; h < c.num_kv_heads; ++h) {
      for (int t0 = 0; t0 < c.num_tokens; t0 += 128) {
        PagedAttentionArgs part = a;
        const size_t first = size_t(t0) * c.num_heads * c.head_dim;
        part.q = q.data() + first;
        part.out = split.data() + first;
        part.start_pos = c.start_pos + t0;
        part.num_tokens = std::min(128, c.num_tokens - t0);
        part.kv_head_begin = h;
        part.kv_head_end = h + 1;
        PagedAttention(part);
      }
    }
    EXPECT_EQ(split, fast) << "start " << c.start_pos << " n " << c.num_tokens;
    a.out = naive.data();
    PagedAttentionNaive(a);
    const int group = c.num_heads / c.num_kv_heads;
    double max_err = 0;
    for (int i = 0; i < c.num_tokens; ++i) {
      const int pos = c.start_pos + i;
      for (int h = 0; h < c.num_heads; ++h) {
        const int kvh = h / group;
        const float* qi = &q[(size_t(i) * c.num_heads + h) * c.head_dim];
        std::vector<double> s(pos + 1);
        double mx = -1e300, sum = 0;
        for (int p = 0; p <= pos; ++p) {
          double dot = 0;
          for (int e = 0; e < c.head_dim; ++e) dot += double(qi[e]) * k[p * kv_row + kvh * c.head_dim + e];
          s[p] = dot * a.scale;
          mx = std::max(mx, s[p]);
        }
        for (int p = 0; p <= pos; ++p) sum += (s[p] = std::exp(s[p] - mx));
        for (int e = 0; e < c.head_dim; ++e) {
          double o = 0;
          for (int p = 0; p <= pos; ++p) o += s[p] / sum * v[p * kv_row + kvh * c.head_dim + e];
          const size_t idx = (size_t(i) * c.num_heads + h) * c.head_dim + e;
          max_err = std::max({max_err, std::abs(fast[idx] - o), std::abs(naive[idx] - o)});
        }
      }
    }
    EXPECT_LT(max_err, 2e-5) << "start " << c.start_pos << " n " << c.num_tokens << " block "
                             << c.block_size;
  }
}

// The prefill tiles (attention_tile.h, AVX-512) against the sgemm path (what runs with AVX2 forced):
// the same up to the order of the sums (OpenBLAS's kernels sum in an order of their own).
TEST(PagedAttentionTest, TilesEqualSgemmPath) {
  if (!LinearIsaSupported(LinearIsa::kAvx512)) GTEST_SKIP() << "no AVX-512";
  struct TileCase {
    int start_pos, num_tokens, num_heads, num_kv_heads, head_dim, block_size;
  };
  const TileCase cases[] = {{0, 37, 4, 2, 64, 16},   {0, 128, 4, 2, 64, 16}, {100, 50, 4, 2, 64, 7},
                            {0, 200, 8, 2, 128, 32}, {3, 17, 2, 1, 64, 1},   {0, 5, 4, 4, 64, 16},
                            {0, 700, 4, 2, 64, 16},  {900, 40, 2, 2, 64, 20}};
  std::mt19937 rng(6);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const TileCase& c : cases) {
    const int bs = c.block_size;
    const int ctx = c.start_pos + c.num_tokens;
    const int nblk = (ctx + bs - 1) / bs;
    std::vector<int32_t> table(nblk);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const long kv_row = long(c.num_kv_heads) * c.head_dim;
    std::vector<float> pool(size_t(nblk) * 2 * bs * kv_row, 0.0f);
    std::vector<float> k(ctx * kv_row), v(ctx * kv_row), q(size_t(c.num_tokens) * c.num_heads * c.head_dim);
    for (float& x : k) x = nd(rng);
    for (float& x : v) x = nd(rng);
    for (float& x : q) x = 2.0f * nd(rng);
    std::vector<int64_t> slots(ctx);
    for (int p = 0; p < ctx; ++p) slots[p] = int64_t(table[p / bs]) * bs + p % bs;
    ReshapeAndCache(k.data(), v.data(), ctx, slots.data(), bs, c.num_kv_heads, c.head_dim, pool.data());
    PagedAttentionArgs a;
    a.q = q.data();
    a.num_tokens = c.num_tokens;
    a.start_pos = c.start_pos;
    a.kv_pool = pool.data();
    a.block_table = table.data();
    a.block_size = bs;
    a.num_heads = c.num_heads;
    a.num_kv_heads = c.num_kv_heads;
    a.head_dim = c.head_dim;
    a.scale = 1.0f / std::sqrt(float(c.head_dim));
    std::vector<float> tiles(q.size(), NAN), sgemm(q.size(), NAN);
    ASSERT_TRUE(SetLinearIsaForTesting(LinearIsa::kAvx512));
    a.out = tiles.data();
    PagedAttention(a);
    ASSERT_TRUE(SetLinearIsaForTesting(LinearIsa::kAvx2));
    a.out = sgemm.data();
    PagedAttention(a);
    SetLinearIsaForTesting(LinearIsa::kAuto);
    const std::string label = "start " + std::to_string(c.start_pos) + " n " + std::to_string(c.num_tokens) +
                              " d " + std::to_string(c.head_dim) + " block " + std::to_string(bs);
    for (size_t i = 0; i < tiles.size(); ++i) ASSERT_NEAR(tiles[i], sgemm[i], 1e-5) << label << " at " << i;
  }
}

}  // namespace
}  // namespace tandem::cpu
