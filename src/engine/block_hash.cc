#include "engine/block_hash.h"

#include <xxhash.h>

namespace tandem {

uint64_t HashBlock(uint64_t parent_hash, std::span<const int32_t> block_token_ids) {
  // Serialize explicitly as little-endian so the hash does not depend on the host.
  std::vector<uint8_t> buf(8 + 4 * block_token_ids.size());
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<uint8_t>(parent_hash >> (8 * i));
  size_t off = 8;
  for (int32_t id : block_token_ids) {
    const uint32_t u = static_cast<uint32_t>(id);
    for (int i = 0; i < 4; ++i) buf[off++] = static_cast<uint8_t>(u >> (8 * i));
  }
  return XXH3_64bits_withSeed(buf.data(), buf.size(), kBlockHashSeed);
}

void ExtendBlockHashes(std::span<const int32_t> token_ids, int block_size,
                       std::vector<uint64_t>* hashes) {
  const size_t num_full = token_ids.size() / static_cast<size_t>(block_size);
  uint64_t parent = hashes->empty() ? 0 : hashes->back();
  for (size_t b = hashes->size(); b < num_full; ++b) {
    parent = HashBlock(parent, token_ids.subspan(b * block_size, block_size));
    hashes->push_back(parent);
  }
}

std::vector<uint64_t> ComputeBlockHashes(std::span<const int32_t> token_ids, int block_size) {
  std::vector<uint64_t> hashes;
  ExtendBlockHashes(token_ids, block_size, &hashes);
  return hashes;
}

}  // namespace tandem
