// Block hashing for prefix caching (DESIGN.md section 4).
//
//   h_i = XXH3_64(parent_hash as 8 bytes little-endian || block token ids as uint32 little-endian),
//   seed 1337; parent_hash of the first block = 0. Only full blocks are hashed.
//
// The same hash identifies a block in the engine, the router's index and KV events.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

inline constexpr uint64_t kBlockHashSeed = 1337;

// Hash of one full block given its parent's hash (0 for the first block).
uint64_t HashBlock(uint64_t parent_hash, std::span<const int32_t> block_token_ids);

// Appends to *hashes the hashes of the full blocks of token_ids that are not hashed yet
// (hashes->size() blocks are assumed already done). A trailing partial block is not hashed.
void ExtendBlockHashes(std::span<const int32_t> token_ids, int block_size,
                       std::vector<uint64_t>* hashes);

// Hashes of all full blocks of token_ids.
std::vector<uint64_t> ComputeBlockHashes(std::span<const int32_t> token_ids, int block_size);

}  // namespace tandem
