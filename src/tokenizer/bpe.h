// BPE model of a byte-level tokenizer.json (huggingface/tokenizers models::bpe): merges ranked by
// their order, applied lowest rank first, ties left to right. Works on raw bytes and token ids: the
// vocabulary's byte-level strings are turned into bytes once at load.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::tok {

// The merges in rank order, and an open-addressing map from a pair of token ids to the rank of its
// merge (4 bytes a slot). A merge (left, right, merged id) takes 8 bytes when every id is below
// 2^21 (any real vocab; 12 bytes otherwise): 2.2 MB for Qwen's 151k merges, against 2.8 MB with
// 12-byte merges and 4.2 MB for (key, rank, id) slots.
class MergeTable {
 public:
  // num_ids: one past the largest id that Add will be given.
  void Reserve(size_t num_merges, size_t num_ids);
  // Appends the merge of the next rank (0, 1, ...). A later merge of the same pair replaces an
  // earlier one in the lookup (as HF's HashMap collect does).
  void Add(int32_t left, int32_t right, int32_t merged_id);
  // The rank of the pair's merge, -1 if there is none.
  int32_t Find(int32_t left, int32_t right) const {
    const uint64_t pair = Pair(left, right);
    for (size_t i = Hash(pair) & mask_;; i = (i + 1) & mask_) {
      const int32_t rank = slots_[i];
      if (rank < 0) return -1;
      if (PairOf(rank) == pair) return rank;
    }
  }
  int32_t merged_id(int32_t rank) const {
    return use_wide_ ? wide_[rank].merged_id : static_cast<int32_t>(packed_[rank] & kIdMask);
  }
  size_t size() const { return size_; }  // distinct pairs

 private:
  struct Merge {
    int32_t left;
    int32_t right;
    int32_t merged_id;
  };
  // Packed: left << 42 | right << 21 | merged id.
  static constexpr int kIdBits = 21;
  static constexpr uint64_t kIdMask = (uint64_t{1} << kIdBits) - 1;

  static uint64_t Pair(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  uint64_t PairOf(int32_t rank) const {
    if (use_wide_) return Pair(wide_[rank].left, wide_[rank].right);
    const uint64_t m = packed_[rank];
    return ((m >> (2 * kIdBits)) << 32) | ((m >> kIdBits) & kIdMask);
  }
  static size_t Hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  void Rehash(size_t cap);

  bool use_wide_ = false;         // some id >= 2^21: merges in wide_, else in packed_
  std::vector<uint64_t> packed_;  // by rank
  std::vector<Merge> wide_;       // by rank
  std::vector<int32_t> slots_;    // rank, -1 empty
  size_t mask_ = 0;
  size_t size_ = 0;
};

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object (its vocab and merges given apart, see
  // tokenizer_json.h). InvalidArgument for anything but a BPE (the type named in the message) or
  // merges naming tokens outside the vocab.
  static Result<std::unique_ptr<BpeModel>> Build(const nlohmann::json& model,
                                                 std::vector<std::pair<std::string, int64_t>> vocab,
                                                 const std::vector<std::pair<std::string, std::string>>& merges);

  // Appends the ids of one pre-token (raw bytes).
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

  // One past the largest vocab id.
  int32_t vocab_end() const { return static_cast<int32_t>(flags_.size()); }
  // Raw bytes of a vocab id (empty for ids the vocab does not have); valid while the model lives.
  std::string_view Bytes(int32_t id) const {
    return std::string_view(bytes_arena_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  bool Has(int32_t id) const { return id >= 0 && id < vocab_end() && (flags_[id] & kHas) != 0; }
  // Vocab string (byte-level form, as in tokenizer.json) -> id.
  std::optional<int32_t> FindToken(std::string_view token) const;

 private:
  // A vocab string's key: its raw bytes, and whether the string is not byte-level (then its bytes
  // are the string itself, as HF's decoder keeps it). One key stands for one string.
  struct Key {
    std::string_view bytes;
    bool raw;
  };
  static Key KeyOf(std::string_view token, std::string* buf);
  static size_t KeyHash(Key k) {
    const size_t h = std::hash<std::string_view>()(k.bytes);
    return k.raw ? h ^ 0x9e3779b97f4a7c15ULL : h;
  }
  bool IdHasKey(int32_t id, Key k) const { return ((flags_[id] & kRaw) != 0) == k.raw && Bytes(id) == k.bytes; }
  std::optional<int32_t> FindKey(Key k) const;
  void IndexInsert(int32_t id);  // the slot for id's key (absent)
  void MergeWord(std::string_view word, std::vector<int32_t>* ids) const;

  // Every id's raw bytes in one arena, in id order: Bytes(id) = [offsets_[id], offsets_[id + 1]).
  std::string bytes_arena_;
  std::vector<uint32_t> offsets_;
  static constexpr uint8_t kHas = 1, kRaw = 2;
  std::vector<uint8_t> flags_;  // kHas: the vocab has the id; kRaw: its string is not byte-level
  // Vocab strings -> ids without a copy of the strings: open addressing over ids, compared by their
  // Key (1 MB for Qwen's 151k tokens against 5.3 MB for an arena of the strings and its index).
  std::vector<int32_t> index_slots_;  // id, -1 empty
  size_t index_mask_ = 0;
  // The rare string whose id the vocab gives again for another string (the id's bytes are the
  // last one's): looked up by the string itself.
  std::unordered_map<std::string, int32_t> index_extra_;
  int32_t byte_id_[256];  // id of the single-byte token, -1 if none
  MergeTable merges_;
  bool ignore_merges_ = false;

  // Per-word cache (bytes -> ids); cleared when it grows past kMaxCacheEntries.
  static constexpr size_t kMaxCacheEntries = 1 << 17;
  static constexpr size_t kMaxCachedWordBytes = 64;
  mutable std::shared_mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace tandem::tok
