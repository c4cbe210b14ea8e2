#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>

#include "tokenizer/byte_level.h"

namespace tandem::tok {

// Open addressing at a load of at most 3/4 (Qwen's 151k merges: 262,144 slots, 4 MiB).
void MergeTable::Reserve(size_t num_merges) {
  size_t cap = 16;
  while (cap * 3 < num_merges * 4) cap <<= 1;
  slots_.assign(cap, Entry{kEmpty, 0, 0});
  mask_ = cap - 1;
  size_ = 0;
}

void MergeTable::Insert(int32_t left, int32_t right, int32_t rank, int32_t merged_id) {
  if ((size_ + 1) * 4 > slots_.size() * 3) {  // grow
    std::vector<Entry> old = std::move(slots_);
    Reserve(std::max<size_t>(old.size(), 12));
    for (const Entry& e : old) {
      if (e.key != kEmpty) Insert(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key), e.rank, e.merged_id);
    }
  }
  const uint64_t key = Key(left, right);
  for (size_t i = Hash(key) & mask_;; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == key) {
      e.rank = rank;
      e.merged_id = merged_id;
      return;
    }
    if (e.key == kEmpty) {
      e = Entry{key, rank, merged_id};
      ++size_;
      return;
    }
  }
}

void TokenIndex::Reserve(size_t num_tokens, size_t num_bytes) {
  arena_.reserve(num_bytes);
  entries_.reserve(num_tokens);
  size_t cap = 16;
  while (cap < num_tokens * 2) cap <<= 1;
  slots_.assign(cap, -1);
  mask_ = cap - 1;
}

void TokenIndex::Grow() {
  const size_t cap = std::max<size_t>(16, slots_.size() * 2);
  slots_.assign(cap, -1);
  mask_ = cap - 1;
  for (size_t e = 0; e < entries_.size(); ++e) {
    size_t i = Hash(Key(entries_[e])) & mask_;
    while (slots_[i] >= 0) i = (i + 1) & mask_;
    slots_[i] = static_cast<int32_t>(e);
  }
}

void TokenIndex::Insert(std::string_view token, int32_t id) {
  if ((entries_.size() + 1) * 2 > slots_.size()) Grow();
  size_t i = Hash(token) & mask_;
  for (; slots_[i] >= 0; i = (i + 1) & mask_) {
    if (Key(entries_[slots_[i]]) == token) return;
  }
  slots_[i] = static_cast<int32_t>(entries_.size());
  entries_.push_back(Entry{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(token.size()), id});
  arena_.append(token);
}

std::optional<int32_t> TokenIndex::Find(std::string_view token) const {
  if (slots_.empty()) return std::nullopt;
  for (size_t i = Hash(token) & mask_; slots_[i] >= 0; i = (i + 1) & mask_) {
    const Entry& e = entries_[slots_[i]];
    if (Key(e) == token) return e.id;
  }
  return std::nullopt;
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
  size_t num_bytes = 0;
  for (const auto& [token, id] : vocab) {
    num_bytes += token.size();
    if (id < 0 || id >= (int64_t{1} << 30)) {
      return Err(StatusCode::kInvalidArgument, "tokenizer.json: bad id {} for '{}'", id, token);
    }
    max_id = std::max(max_id, id);
  }
  bpe->vocab_.Reserve(vocab.size(), num_bytes);
  bpe->id_bytes_.assign(static_cast<size_t>(max_id + 1), ByteSpan{});
  bpe->bytes_arena_.reserve(num_bytes);
  bpe->has_id_.assign(static_cast<size_t>(max_id + 1), 0);
  std::fill(std::begin(bpe->byte_id_), std::end(bpe->byte_id_), -1);
  std::string bytes;
  for (auto& [token, id64] : vocab) {
    const auto id = static_cast<int32_t>(id64);
    if (!ByteLevelToBytes(token, &bytes)) bytes = token;  // not byte-level: HF's decoder keeps it as is
    else if (bytes.size() == 1) bpe->byte_id_[static_cast<unsigned char>(bytes[0])] = id;
    bpe->id_bytes_[id] = ByteSpan{static_cast<uint32_t>(bpe->bytes_arena_.size()), static_cast<uint32_t>(bytes.size())};
    bpe->bytes_arena_ += bytes;
    bpe->has_id_[id] = 1;
    bpe->vocab_.Insert(token, id);
  }

  bpe->merges_.Reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    joined.assign(left);
    joined += right;
    const auto l = bpe->vocab_.Find(left), r = bpe->vocab_.Find(right), j = bpe->vocab_.Find(joined);
    if (!l || !r || !j) {
      return Err(StatusCode::kInvalidArgument, "tokenizer.json: merge '{} {}' names a token outside the vocab", left,
                 right);
    }
    bpe->merges_.Insert(*l, *r, static_cast<int32_t>(rank), *j);
  }
  return bpe;
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // a word that is a token as a whole is that token
    if (const auto id = vocab_.Find(BytesToByteLevel(word))) {
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
    if (const MergeTable::Entry* e = merges_.Find(sym[pos].id, sym[nx].id)) {
      heap.push(Candidate{e->rank, pos, sym[pos].id, sym[nx].id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(sym.size()); ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[c.pos];
    if (s.id != c.left_id || s.next < 0 || sym[s.next].id != c.right_id) continue;  // stale
    const MergeTable::Entry* e = merges_.Find(c.left_id, c.right_id);
    const int32_t removed = s.next;
    s.id = e->merged_id;
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
