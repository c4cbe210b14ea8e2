// Tokenizer::Load and the byte-level BPE tokenizer built from tokenizer.json.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_json.h"
#include "tokenizer/utf8.h"

namespace tandem {

namespace {

using tok::AddedToken;
using tok::AddedTokenMatcher;

class BpeTokenizer final : public Tokenizer {
 public:
  static Result<std::shared_ptr<const Tokenizer>> Build(tok::TokenizerJson data);

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options) const override;
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  std::string TokenBytes(int32_t id) const override { return std::string(Bytes(id)); }
  std::optional<int32_t> TokenToId(std::string_view token) const override {
    const std::string key(token);
    if (auto it = added_to_id_.find(key); it != added_to_id_.end()) return it->second;
    return bpe_->FindToken(key);
  }
  bool IsSpecial(int32_t id) const override {
    const int32_t a = AddedIndex(id);
    return a >= 0 && added_[a].special;
  }
  int32_t vocab_size() const override { return vocab_size_; }

 private:
  std::string_view Bytes(int32_t id) const {
    if (id < 0 || id >= vocab_size_) return {};
    if (const int32_t a = AddedIndex(id); a >= 0) return added_[a].content;
    return bpe_->Has(id) ? bpe_->Bytes(id) : std::string_view();
  }
  // Normalizes, pre-tokenizes and BPE-encodes ordinary text (raw bytes, maybe invalid UTF-8).
  void EncodeOrdinary(std::string_view text, const EncodeOptions& options, size_t offset,
                      std::vector<int32_t>* ids) const;

  std::unique_ptr<tok::BpeModel> bpe_;
  tok::Normalizer normalizer_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::vector<AddedToken> added_;
  AddedTokenMatcher raw_matcher_;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher_;  // normalized == true, matched after normalization
  // Index into added_ of an id (the last added token with it), -1 if not an added token. Over the
  // ids the added tokens span only (Qwen: 26 at the end, not a table of the 151k vocab).
  int32_t AddedIndex(int32_t id) const {
    const int64_t k = int64_t{id} - added_lo_;
    return k >= 0 && k < static_cast<int64_t>(added_index_.size()) ? added_index_[k] : -1;
  }
  std::vector<int32_t> added_index_;  // id - added_lo_ -> index into added_, -1 if none
  int32_t added_lo_ = 0;
  std::unordered_map<std::string, int32_t> added_to_id_;  // added token content -> id
  int32_t vocab_size_ = 0;
};

Result<std::shared_ptr<const Tokenizer>> BpeTokenizer::Build(tok::TokenizerJson data) {
  const nlohmann::json& j = data.rest;
  if (!j.is_object()) return Err(StatusCode::kInvalidArgument, "tokenizer.json is not a JSON object");
  auto t = std::make_shared<BpeTokenizer>();

  auto model = j.find("model");
  if (model == j.end()) return Err(StatusCode::kInvalidArgument, "tokenizer.json has no \"model\"");
  if (!data.bad_entries.empty()) {
    return Err(StatusCode::kInvalidArgument, "tokenizer.json: bad model vocab / merges entry: {}",
               data.bad_entries.front().substr(0, 200));
  }
  TANDEM_ASSIGN_OR_RETURN(t->bpe_, tok::BpeModel::Build(*model, std::move(data.vocab), data.merges));

  const nlohmann::json kNull;
  auto field = [&](const char* key) -> const nlohmann::json& {
    auto it = j.find(key);
    return it == j.end() ? kNull : *it;
  };
  TANDEM_ASSIGN_OR_RETURN(t->normalizer_, tok::Normalizer::FromJson(field("normalizer")));
  TANDEM_ASSIGN_OR_RETURN(t->pre_tokenizer_, tok::PreTokenizer::FromJson(field("pre_tokenizer")));
  const nlohmann::json& decoder = field("decoder");
  if (!decoder.is_null()) {
    const std::string type = decoder.value("type", std::string());
    if (type != "ByteLevel") {
      return Err(StatusCode::kInvalidArgument, "tokenizer.json: unsupported decoder type '{}' (only ByteLevel)", type);
    }
  }
  // The post_processor (ByteLevel offsets, TemplateProcessing BOS) is not applied: Encode never
  // adds special tokens; chat templates write them.

  for (const auto& a : field("added_tokens")) {
    AddedToken tok;
    tok.id = a.at("id").get<int32_t>();
    tok.content = a.at("content").get<std::string>();
    tok.special = a.value("special", false);
    tok.lstrip = a.value("lstrip", false);
    tok.rstrip = a.value("rstrip", false);
    tok.normalized = a.value("normalized", !tok.special);
    tok.single_word = a.value("single_word", false);
    if (tok.id < 0) return Err(StatusCode::kInvalidArgument, "tokenizer.json: added token with negative id");
    t->added_.push_back(std::move(tok));
  }

  int32_t vocab_size = t->bpe_->vocab_end();
  for (const AddedToken& a : t->added_) vocab_size = std::max(vocab_size, a.id + 1);
  t->vocab_size_ = vocab_size;
  int32_t added_hi = -1;
  t->added_lo_ = vocab_size;
  for (const AddedToken& a : t->added_) {
    t->added_lo_ = std::min(t->added_lo_, a.id);
    added_hi = std::max(added_hi, a.id);
  }
  t->added_index_.assign(static_cast<size_t>(std::max(0, added_hi + 1 - t->added_lo_)), -1);
  for (size_t i = 0; i < t->added_.size(); ++i) {
    const AddedToken& a = t->added_[i];
    t->added_index_[a.id - t->added_lo_] = static_cast<int32_t>(i);
    t->added_to_id_[a.content] = a.id;
  }

  std::vector<std::string> raw_patterns, norm_patterns;
  std::vector<size_t> raw_idx, norm_idx;
  for (size_t i = 0; i < t->added_.size(); ++i) {
    const AddedToken& a = t->added_[i];
    if (a.normalized && !t->normalizer_.empty()) {
      norm_patterns.push_back(t->normalizer_.Normalize(a.content));
      norm_idx.push_back(i);
    } else {
      raw_patterns.push_back(a.content);
      raw_idx.push_back(i);
    }
  }
  t->raw_matcher_.Build(&t->added_, raw_patterns, raw_idx);
  t->normalized_matcher_.Build(&t->added_, norm_patterns, norm_idx);
  return std::shared_ptr<const Tokenizer>(std::move(t));
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedTokenMatcher::Segment> segments;
  raw_matcher_.Split(text, options.parse_special, options.literal_ranges, 0, &segments);
  for (const auto& s : segments) {
    if (s.token >= 0) {
      ids.push_back(added_[s.token].id);
    } else {
      EncodeOrdinary(text.substr(s.begin, s.end - s.begin), options, s.begin, &ids);
    }
  }
  return ids;
}

void BpeTokenizer::EncodeOrdinary(std::string_view text, const EncodeOptions& options, size_t offset,
                                  std::vector<int32_t>* ids) const {
  // Invalid UTF-8 in the input is read as U+FFFD (HF only takes valid strings).
  std::string repaired;
  if (!tok::IsValidUtf8(text)) {
    tok::AppendUtf8Lossy(text, /*final=*/true, &repaired);
    text = repaired;
  }
  const std::string normalized = normalizer_.empty() ? std::string(text) : normalizer_.Normalize(text);

  std::vector<AddedTokenMatcher::Segment> segments;
  if (normalized_matcher_.empty()) {
    segments.push_back({0, normalized.size(), -1});
  } else {
    // Offsets in normalized text no longer map to the caller's bytes: a segment that touches a
    // literal range gets no special matches at all.
    const bool literal = !options.literal_ranges.empty() &&
                         std::any_of(options.literal_ranges.begin(), options.literal_ranges.end(), [&](const auto& r) {
                           return r.first < offset + text.size() && r.second > offset;
                         });
    normalized_matcher_.Split(normalized, options.parse_special && !literal, {}, 0, &segments);
  }
  std::vector<std::string> pieces;
  for (const auto& s : segments) {
    if (s.token >= 0) {
      ids->push_back(added_[s.token].id);
      continue;
    }
    pieces.clear();
    pre_tokenizer_->Split(std::string_view(normalized).substr(s.begin, s.end - s.begin), &pieces);
    for (const std::string& p : pieces) bpe_->EncodeWord(p, ids);
  }
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    if (skip_special_tokens && IsSpecial(id)) continue;
    bytes += Bytes(id);
  }
  std::string out;
  out.reserve(bytes.size());
  tok::AppendUtf8Lossy(bytes, /*final=*/true, &out);
  return out;
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> Tokenizer::Load(const std::string& model_dir) {
  const std::string path = model_dir + "/tokenizer.json";
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<tok::MappedFile> file, tok::MappedFile::Open(path));
  try {
    TANDEM_ASSIGN_OR_RETURN(tok::TokenizerJson data, tok::ParseTokenizerJson(file->data(), path));
    file.reset();
    return BpeTokenizer::Build(std::move(data));
  } catch (const nlohmann::json::exception& e) {
    return Err(StatusCode::kInvalidArgument, "{}: unexpected structure: {}", path, e.what());
  }
}

}  // namespace tandem
