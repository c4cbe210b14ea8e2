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

// Open-addressing map from a pair of token ids to (rank, merged id).
class MergeTable {
 public:
  struct Entry {
    uint64_t key;
    int32_t rank;
    int32_t merged_id;
  };
  void Reserve(size_t num_merges);
  // A later merge of the same pair replaces an earlier one (as HF's HashMap collect does).
  void Insert(int32_t left, int32_t right, int32_t rank, int32_t merged_id);
  const Entry* Find(int32_t left, int32_t right) const {
    const uint64_t key = Key(left, right);
    for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t Key(int32_t l, int32_t r) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
  }
  static size_t Hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Open-addressing map from token strings (kept in one arena) to ids: far fewer cache misses and
// allocations than std::unordered_map<std::string, int> at 150k entries.
class TokenIndex {
 public:
  void Reserve(size_t num_tokens, size_t num_bytes);
  // Keeps the first id given for a string.
  void Insert(std::string_view token, int32_t id);
  std::optional<int32_t> Find(std::string_view token) const;

 private:
  struct Entry {
    uint32_t offset;
    uint32_t length;
    int32_t id;
  };
  static uint64_t Hash(std::string_view s) { return std::hash<std::string_view>()(s); }
  std::string_view Key(const Entry& e) const { return std::string_view(arena_).substr(e.offset, e.length); }
  void Grow();

  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<int32_t> slots_;  // index into entries_, -1 empty
  size_t mask_ = 0;
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
  int32_t vocab_end() const { return static_cast<int32_t>(id_bytes_.size()); }
  // Raw bytes of a vocab id (empty for ids the vocab does not have); valid while the model lives.
  std::string_view Bytes(int32_t id) const {
    const ByteSpan& s = id_bytes_[id];
    return std::string_view(bytes_arena_.data() + s.offset, s.length);
  }
  bool Has(int32_t id) const { return id >= 0 && id < vocab_end() && has_id_[id]; }
  // Vocab string (byte-level form, as in tokenizer.json) -> id.
  std::optional<int32_t> FindToken(std::string_view token) const { return vocab_.Find(token); }

 private:
  void MergeWord(std::string_view word, std::vector<int32_t>* ids) const;

  TokenIndex vocab_;
  // Every id's raw bytes in one arena (a std::string per id took ~7 MB for Qwen's 151k tokens).
  struct ByteSpan {
    uint32_t offset = 0;
    uint32_t length = 0;
  };
  std::string bytes_arena_;
  std::vector<ByteSpan> id_bytes_;
  std::vector<uint8_t> has_id_;
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
