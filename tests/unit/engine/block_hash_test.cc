#include "engine/block_hash.h"

#include <cstring>
#include <vector>

#include <gtest/gtest.h>
#include <xxhash.h>

namespace tandem {
namespace {

// The bytes DESIGN.md section 4 names, written out by hand.
uint64_t HandHash(uint64_t parent, const std::vector<uint32_t>& ids) {
  std::vector<unsigned char> buf;
  for (int i = 0; i < 8; ++i) buf.push_back(static_cast<unsigned char>((parent >> (8 * i)) & 0xff));
  for (uint32_t id : ids) {
    buf.push_back(id & 0xff);
    buf.push_back((id >> 8) & 0xff);
    buf.push_back((id >> 16) & 0xff);
    buf.push_back((id >> 24) & 0xff);
  }
  return XXH3_64bits_withSeed(buf.data(), buf.size(), 1337);
}

TEST(BlockHash, FirstBlockMatchesHandBuiltBytes) {
  const std::vector<int32_t> ids = {785, 21234, 1053, 151645};
  const uint64_t expected = HandHash(0, {785, 21234, 1053, 151645});
  EXPECT_EQ(HashBlock(0, ids), expected);
  // A fixed literal: the first block 0x00..00 ‖ [1, 2, 3, 4] (bytes 01 00 00 00 02 00 ...).
  unsigned char bytes[24] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};
  const std::vector<int32_t> small = {1, 2, 3, 4};
  EXPECT_EQ(HashBlock(0, small), XXH3_64bits_withSeed(bytes, sizeof bytes, 1337));
  EXPECT_NE(HashBlock(0, small), XXH3_64bits_withSeed(bytes, sizeof bytes, 0));  // the seed matters
}

TEST(BlockHash, ChainsThroughParents) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 10; ++i) tokens.push_back(1000 + 7 * i);
  const auto hashes = ComputeBlockHashes(tokens, 4);
  ASSERT_EQ(hashes.size(), 2u);  // 10 tokens: two full blocks, the partial third is not hashed
  const uint64_t h0 = HandHash(0, {1000, 1007, 1014, 1021});
  const uint64_t h1 = HandHash(h0, {1028, 1035, 1042, 1049});
  EXPECT_EQ(hashes[0], h0);
  EXPECT_EQ(hashes[1], h1);
  // Same block content, different parent: a different hash.
  EXPECT_NE(HashBlock(0, std::vector<int32_t>{1028, 1035, 1042, 1049}), h1);
}

TEST(BlockHash, ExtendIsIncremental) {
  std::vector<int32_t> tokens = {1, 2, 3};
  std::vector<uint64_t> hashes;
  ExtendBlockHashes(tokens, 2, &hashes);
  EXPECT_EQ(hashes.size(), 1u);
  tokens.push_back(4);
  tokens.push_back(5);
  ExtendBlockHashes(tokens, 2, &hashes);
  EXPECT_EQ(hashes, ComputeBlockHashes(tokens, 2));
  EXPECT_EQ(hashes.size(), 2u);
  EXPECT_TRUE(ComputeBlockHashes(std::vector<int32_t>{1, 2, 3}, 16).empty());
}

}  // namespace
}  // namespace tandem
