#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "tokenizer/byte_level.h"

namespace tandem::tok {

// Open addressing at a load of at most 3/4 (Qwen's 151k merges: 262,144 slots).
void MergeTable::Reserve(size_t num_merges, size_t num_ids) {
  use_wide_ = num_ids > (size_t{1} << kIdBits);
  packed_.clear();
  wide_.clear();
  if (use_wide_) {
    wide_.reserve(num_merges);
  } else {
    packed_.reserve(num_merges);
  }
  size_t cap = 16;
  while (cap * 3 < num_merges * 4) cap <<= 1;
  slots_.assign(cap, -1);
  mask_ = cap - 1;
  size_ = 0;
}

void MergeTable::Rehash(size_t cap) {
  std::vector<int32_t> old = std::move(slots_);
  slots_.assign(cap, -1);
  mask_ = cap - 1;
  for (const int32_t rank : old) {
    if (rank < 0) continue;
    size_t i = Hash(PairOf(rank)) & mask_;
    while (slots_[i] >= 0) i = (i + 1) & mask_;
    slots_[i] = rank;
  }
}

void MergeTable::Add(int32_t left, int32_t right, int32_t merged_id) {
  if (slots_.empty() || (size_ + 1) * 4 > slots_.size() * 3) Rehash(std::max<size_t>(16, slots_.size() * 2));
  const uint64_t pair = Pair(left, right);
  int32_t rank;
  if (use_wide_) {
    rank = static_cast<int32_t>(wide_.size());
    wide_.push_back(Merge{left, right, merged_id});
  } else {
    rank = static_cast<int32_t>(packed_.size());
    packed_.push_back((static_cast<uint64_t>(left) << (2 * kIdBits)) |
                      (static_cast<uint64_t>(right) << kIdBits) | static_cast<uint64_t>(merged_id));
  }
  for (size_t i = Hash(pair) & mask_;; i = (i + 1) & mask_) {
    int32_t& slot = slots_[i];
    if (slot < 0) {
      slot = rank;
      ++size_;
      return;
    }
    if (PairOf(slot) == pair) {
      slot = rank;
      return;
    }
  }
}

BpeModel::Key BpeModel::KeyOf(std::string_view token, std::string* buf) {
  if (ByteLevelToBytes(token, buf)) return Key{*buf, false};
  return Key{token, true};
}

std::optional<int32_t> BpeModel::FindKey(Key k) const {
  if (index_slots_.empty()) return std::nullopt;
  for (size_t i = KeyHash(k) & index_mask_;; i = (i + 1) & index_mask_) {
    const int32_t id = index_slots_[i];
    if (id < 0) return std::nullopt;
    if (IdHasKey(id, k)) return id;
  }
}

std::optional<int32_t> BpeModel::FindToken(std::string_view token) const {
  std::string buf;
  if (const auto id = FindKey(KeyOf(token, &buf))) return id;
  if (index_extra_.empty()) return std::nullopt;
  const auto it = index_extra_.find(std::string(token));
  if (it == index_extra_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::IndexInsert(int32_t id) {
  const Key k{Bytes(id), (flags_[id] & kRaw) != 0};
  size_t i = KeyHash(k) & index_mask_;
  while (index_slots_[i] >= 0) i = (i + 1) & index_mask_;
  index_slots_[i] = id;
}

Result<std::unique_ptr<BpeModel>> BpeModel::Build(const nlohmann::json& model,
                                                 std::vector<std::pair<std::string, int64_t>> vocab,
                                                 const std::vector<std::pair<std::string, std::string>>& merges) {
  if (!model.is_object()) return Err(StatusCode::kInvalidArgument, "tokenizer.json: \"model\" is not an object");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") {
    return Err(StatusCode::kInvalidArgument, "tokenizer.json: unsupported model type '{}' (only BPE)", type);
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && it->is_string() && !it->get_ref<const std::string&>().empty()) {
      return Err(StatusCode::kInvalidArgument, "tokenizer.json: unsupported BPE option {}", key);
    }
  }
  if (auto it = model.find("dropout"); it != model.end() && it->is_number() && it->get<double>() != 0.0) {
    return Err(StatusCode::kInvalidArgument, "tokenizer.json: unsupported BPE option dropout");
  }
  if (!model.contains("vocab") || !model.contains("merges") || vocab.empty()) {
    return Err(StatusCode::kInvalidArgument, "tokenizer.json: BPE model without vocab / merges");
  }

  auto bpe = std::make_unique<BpeModel>();
  bpe->ignore_merges_ = model.value("ignore_merges", false);
  int64_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id >= (int64_t{1} << 30)) {
      return Err(StatusCode::kInvalidArgument, "tokenizer.json: bad id {} for '{}'", id, token);
    }
    max_id = std::max(max_id, id);
  }
  const auto num_ids = static_cast<size_t>(max_id + 1);
  // An id's bytes are those of the last string the vocab gives it; a single byte's token is the
  // last string that stands for that byte.
  std::vector<int32_t> last(num_ids, -1);
  std::fill(std::begin(bpe->byte_id_), std::end(bpe->byte_id_), -1);
  std::string bytes;
  size_t num_bytes = 0;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const auto& [token, id64] = vocab[i];
    const auto id = static_cast<int32_t>(id64);
    const Key k = KeyOf(token, &bytes);
    if (!k.raw && k.bytes.size() == 1) bpe->byte_id_[static_cast<unsigned char>(k.bytes[0])] = id;
    if (last[id] < 0) num_bytes += k.bytes.size();
    last[id] = static_cast<int32_t>(i);
  }
  bpe->flags_.assign(num_ids, 0);
  bpe->offsets_.assign(num_ids + 1, 0);
  bpe->bytes_arena_.reserve(num_bytes);
  for (size_t id = 0; id < num_ids; ++id) {
    bpe->offsets_[id] = static_cast<uint32_t>(bpe->bytes_arena_.size());
    if (last[id] < 0) continue;
    const Key k = KeyOf(vocab[last[id]].first, &bytes);
    bpe->bytes_arena_.append(k.bytes);
    bpe->flags_[id] = kHas | (k.raw ? kRaw : 0);
  }
  bpe->offsets_[num_ids] = static_cast<uint32_t>(bpe->bytes_arena_.size());
  bpe->bytes_arena_.shrink_to_fit();
  // The index at a load of at most 3/4; a string keeps the first id the vocab gives it.
  size_t cap = 16;
  while (cap * 3 < vocab.size() * 4) cap <<= 1;
  bpe->index_slots_.assign(cap, -1);
  bpe->index_mask_ = cap - 1;
  for (size_t i = 0; i < vocab.size(); ++i) {
    const auto& [token, id64] = vocab[i];
    const auto id = static_cast<int32_t>(id64);
    const Key k = KeyOf(token, &bytes);
    if (bpe->FindKey(k) || bpe->index_extra_.count(token) != 0) continue;  // FindToken(token)
    if (bpe->IdHasKey(id, k)) {
      bpe->IndexInsert(id);
    } else {
      bpe->index_extra_.emplace(token, id);
    }
  }
  vocab = {};

  bpe->merges_.Reserve(merges.size(), num_ids);
  std::string joined;
  auto find = [&](std::string_view token) {  // FindToken with one buffer
    if (const auto id = bpe->FindKey(KeyOf(token, &bytes))) return id;
    return bpe->index_extra_.empty() ? std::nullopt : bpe->FindToken(token);
  };
  for (const auto& [left, right] : merges) {
    joined.assign(left);
    joined += right;
    const auto l = find(left), r = find(right), j = find(joined);
    if (!l || !r || !j) {
      return Err(StatusCode::kInvalidArgument, "tokenizer.json: merge '{} {}' names a token outside the vocab", left,
                 right);
    }
    bpe->merges_.Add(*l, *r, *j);
  }
  return bpe;
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // a word that is a token as a whole is that token
    // FindToken(BytesToByteLevel(word)) without the round trip: that string's key is the word.
    std::optional<int32_t> id = FindKey(Key{word, false});
    if (!id && !index_extra_.empty()) {
      const auto it = index_extra_.find(BytesToByteLevel(word));
      if (it != index_extra_.end()) id = it->second;
    }
    if (id) {
      ids->push_back(*id);
      return;
    }
  }
  if (word.size() == 1) {
    const int32_t id = byte_id_[static_cast<unsigned char>(word[0])];
    if (id >= 0) ids->push_back(id);
    return;
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  std::string key;
  if (cacheable) {
    key.assign(word);
    std::shared_lock lock(cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = ids->size();
  MergeWord(word, ids);
  if (cacheable) {
    std::vector<int32_t> value(ids->begin() + static_cast<std::ptrdiff_t>(start), ids->end());
    std::unique_lock lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), std::move(value));
  }
}

// Symbols form a doubly linked list over the word's bytes; a min-heap holds candidate merges
// (rank, left position). A candidate is stale when either symbol changed since it was pushed.
// O(n log n) in the word's length.
void BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (unsigned char b : word) {
    const int32_t id = byte_id_[b];
    if (id < 0) continue;  // a byte outside the vocab (no unk token): dropped, as HF does
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{id, n - 1, -1});
    if (n > 0) sym[n - 1].next = n;
  }
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0) return;
    const int32_t nx = sym[pos].next;
    if (nx < 0) return;
    if (const int32_t rank = merges_.Find(sym[pos].id, sym[nx].id); rank >= 0) {
      heap.push(Candidate{rank, pos, sym[pos].id, sym[nx].id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[c.pos];
    if (s.id != c.left_id || s.next < 0 || sym[s.next].id != c.right_id) continue;  // stale
    const int32_t removed = s.next;
    s.id = merges_.merged_id(c.rank);
    s.next = sym[removed].next;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    sym[removed].id = -1;  // dead
    sym[removed].next = -1;
    if (s.prev >= 0) push(s.prev);
    push(c.pos);
  }
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) ids->push_back(sym[i].id);
}

}  // namespace tandem::tok
