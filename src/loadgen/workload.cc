#include "loadgen/workload.h"

#include <algorithm>
#include <cmath>

#include "common/file_util.h"

namespace tandem::bench {

uint64_t MixSeed(uint64_t a, uint64_t b);  // datasets.cc uses it too

uint64_t MixSeed(uint64_t a, uint64_t b) {  // splitmix64 of a combination
  uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int LengthDist::Sample(std::mt19937_64& rng) const {
  switch (kind) {
    case Kind::kFixed:
      return static_cast<int>(a);
    case Kind::kUniform: {
      const auto lo = static_cast<uint64_t>(a), hi = static_cast<uint64_t>(b);
      return static_cast<int>(lo + rng() % (hi - lo + 1));
    }
    case Kind::kNormal: {
      std::normal_distribution<double> d(a, b);
      return std::max(1, static_cast<int>(std::lround(d(rng))));
    }
  }
  return 1;
}

double LengthDist::Mean() const { return kind == Kind::kUniform ? (a + b) / 2 : a; }

std::string LengthDist::ToString() const {
  switch (kind) {
    case Kind::kFixed: return fmt::format("{}", a);
    case Kind::kUniform: return fmt::format("uniform:{}:{}", a, b);
    case Kind::kNormal: return fmt::format("normal:{}:{}", a, b);
  }
  return "";
}

Result<LengthDist> ParseLengthDist(const std::string& text) {
  auto bad = [&] {
    return Err(StatusCode::kInvalidArgument,
               "length '{}': expected N, uniform:A:B or normal:MU:SIGMA (positive)", text);
  };
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  auto number = [](const std::string& s, double* v) {
    try {
      size_t used = 0;
      *v = std::stod(s, &used);
      return used == s.size() && std::isfinite(*v);
    } catch (...) {
      return false;
    }
  };
  LengthDist d;
  if (parts.size() == 1) {
    if (!number(parts[0], &d.a) || d.a < 1 || d.a != std::floor(d.a)) return bad();
    return d;
  }
  if (parts.size() != 3 || !number(parts[1], &d.a) || !number(parts[2], &d.b)) return bad();
  if (parts[0] == "uniform") {
    d.kind = LengthDist::Kind::kUniform;
    d.a = std::floor(d.a);
    d.b = std::floor(d.b);
    if (d.a < 1 || d.b < d.a) return bad();
  } else if (parts[0] == "normal") {
    d.kind = LengthDist::Kind::kNormal;
    if (d.a < 1 || d.b < 0) return bad();
  } else {
    return bad();
  }
  return d;
}

Result<std::shared_ptr<const PromptVocab>> PromptVocab::FromTokenizer(const Tokenizer& tokenizer) {
  auto vocab = std::make_shared<PromptVocab>();
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    std::string bytes = tokenizer.TokenBytes(id);
    if (bytes.size() < 3 || bytes.size() > 9 || bytes[0] != ' ') continue;
    if (!std::all_of(bytes.begin() + 1, bytes.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
      continue;
    // The word alone must encode to itself, and so must two of it ("x x"): one token per word.
    std::vector<int32_t> ids = tokenizer.Encode(bytes + bytes);
    if (ids.size() != 2 || ids[0] != id || ids[1] != id) continue;
    vocab->words_.push_back(std::move(bytes));
  }
  if (vocab->words_.size() < 64)
    return Err(StatusCode::kInvalidArgument,
               "the tokenizer has {} words usable for prompts (at least 64 needed)",
               vocab->words_.size());
  return std::shared_ptr<const PromptVocab>(std::move(vocab));
}

std::string PromptVocab::Words(int n, std::mt19937_64& rng) const {
  std::string out;
  for (int i = 0; i < n; ++i) out += words_[rng() % words_.size()];
  return out;
}

std::string PromptVocab::Words(int n, uint64_t seed) const {
  std::mt19937_64 rng(seed);
  return Words(n, rng);
}

namespace {

class SyntheticWorkload : public Workload {
 public:
  SyntheticWorkload(WorkloadOptions o, std::shared_ptr<const PromptVocab> vocab)
      : o_(std::move(o)), vocab_(std::move(vocab)) {}

  std::optional<WorkItem> Next() override {
    WorkItem item;
    item.id = next_id_++;
    std::mt19937_64 rng(MixSeed(o_.seed, item.id));
    if (o_.num_prefixes > 0 && o_.prefix_len > 0) {
      const uint64_t prefix = item.id % static_cast<uint64_t>(o_.num_prefixes);
      item.system = vocab_->Words(o_.prefix_len, MixSeed(o_.seed ^ 0x5eed, prefix));
      item.system_tokens = o_.prefix_len;
    }
    for (int t = 0; t < std::max(1, o_.num_turns); ++t) {
      Turn turn;
      turn.input_tokens = o_.input_len.Sample(rng);
      turn.output_tokens = o_.output_len.Sample(rng);
      turn.text = vocab_->Words(turn.input_tokens, rng);
      item.turns.push_back(std::move(turn));
    }
    return item;
  }

 private:
  WorkloadOptions o_;
  std::shared_ptr<const PromptVocab> vocab_;
  uint64_t next_id_ = 0;
};

// A fixed list, cycled (ShareGPT) or used once (trace, keeping timestamps).
class ListWorkload : public Workload {
 public:
  ListWorkload(std::vector<WorkItem> items, bool cycle, bool timestamps)
      : items_(std::move(items)), cycle_(cycle), timestamps_(timestamps) {}
  std::optional<WorkItem> Next() override {
    if (items_.empty() || (!cycle_ && next_ >= items_.size())) return std::nullopt;
    WorkItem item = items_[next_ % items_.size()];
    item.id = next_++;
    return item;
  }
  bool has_timestamps() const override { return timestamps_; }

 private:
  std::vector<WorkItem> items_;
  bool cycle_, timestamps_;
  size_t next_ = 0;
};

}  // namespace

Result<std::unique_ptr<Workload>> MakeWorkload(const WorkloadOptions& options,
                                               std::shared_ptr<const Tokenizer> tokenizer,
                                               std::shared_ptr<const PromptVocab> vocab) {
  if (options.kind == "synthetic")
    return std::unique_ptr<Workload>(std::make_unique<SyntheticWorkload>(options, std::move(vocab)));
  if (options.path.empty())
    return Err(StatusCode::kInvalidArgument, "--dataset {} needs --dataset-path", options.kind);
  auto text = ReadFile(options.path);
  if (!text.ok()) return text.status();
  if (options.kind == "sharegpt") {
    auto items = LoadShareGpt(*text, *tokenizer, options);
    if (!items.ok()) return items.status();
    if (items->empty())
      return Err(StatusCode::kInvalidArgument, "{}: no usable ShareGPT conversation", options.path);
    // Shuffled once (seeded) so that a short run does not only see the file's first entries.
    std::mt19937_64 rng(MixSeed(options.seed, 7));
    std::shuffle(items->begin(), items->end(), rng);
    return std::unique_ptr<Workload>(std::make_unique<ListWorkload>(std::move(*items), true, false));
  }
  if (options.kind == "mooncake") {
    auto entries = ParseMooncake(*text);
    if (!entries.ok())
      return Err(StatusCode::kInvalidArgument, "{}: {}", options.path, entries.status().message());
    std::vector<WorkItem> items;
    for (size_t i = 0; i < entries->size(); ++i) {
      const MooncakeEntry& e = (*entries)[i];
      WorkItem item;
      item.id = i;
      item.timestamp_s = e.timestamp_ms / 1000.0;
      Turn turn;
      turn.text = MooncakePrompt(e, options.block_size, *vocab, options.seed, i);
      turn.input_tokens = e.input_length;
      turn.output_tokens = std::max(1, e.output_length);
      item.turns.push_back(std::move(turn));
      items.push_back(std::move(item));
    }
    return std::unique_ptr<Workload>(std::make_unique<ListWorkload>(std::move(items), false, true));
  }
  return Err(StatusCode::kInvalidArgument, "unknown dataset '{}' (synthetic, sharegpt, mooncake)",
             options.kind);
}

}  // namespace tandem::bench
