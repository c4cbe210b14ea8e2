#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace tandem::tok {

namespace {

bool Overlaps(const std::vector<std::pair<size_t, size_t>>& ranges, size_t b, size_t e) {
  // First range whose end lies after b.
  auto it = std::upper_bound(ranges.begin(), ranges.end(), b,
                             [](size_t v, const std::pair<size_t, size_t>& r) { return v < r.second; });
  return it != ranges.end() && it->first < e;
}

bool ValidUtf8Boundary(std::string_view s, size_t i) {
  return i == 0 || i >= s.size() || (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
}

}  // namespace

void AddedTokenMatcher::Build(const std::vector<AddedToken>* tokens, const std::vector<std::string>& patterns,
                              const std::vector<size_t>& indices) {
  tokens_ = tokens;
  edges_.clear();
  terminal_.assign(1, -1);
  std::fill(std::begin(first_byte_), std::end(first_byte_), false);
  num_patterns_ = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const std::string& p = patterns[k];
    if (p.empty()) continue;
    int32_t node = 0;
    for (unsigned char b : p) {
      const uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        const auto child = static_cast<int32_t>(terminal_.size());
        terminal_.push_back(-1);
        it = edges_.emplace(key, child).first;
      }
      node = it->second;
    }
    if (terminal_[node] < 0) terminal_[node] = static_cast<int32_t>(indices[k]);  // first wins
    first_byte_[static_cast<unsigned char>(p[0])] = true;
    ++num_patterns_;
  }
}

void AddedTokenMatcher::Split(std::string_view text, bool parse_special,
                              const std::vector<std::pair<size_t, size_t>>& literal_ranges, size_t range_offset,
                              std::vector<Segment>* out) const {
  size_t seg_begin = 0;  // start of the pending ordinary segment
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (!first_byte_[static_cast<unsigned char>(text[i])] || !ValidUtf8Boundary(text, i)) {
      ++i;
      continue;
    }
    // Longest eligible match starting at i.
    int32_t best = -1;
    size_t best_end = 0;
    int32_t node = 0;
    for (size_t j = i; j < n; ++j) {
      node = Child(node, static_cast<unsigned char>(text[j]));
      if (node < 0) break;
      const int32_t t = terminal_[node];
      if (t < 0) continue;
      const AddedToken& tok = (*tokens_)[t];
      const size_t e = j + 1;
      if (tok.special &&
          (!parse_special || Overlaps(literal_ranges, i + range_offset, e + range_offset))) {
        continue;
      }
      if (tok.single_word) {
        size_t pb;
        const bool word_before = i > 0 && IsAlphanumeric(PrevCodePoint(text, i, &pb));
        size_t k = e;
        const bool word_after = e < n && IsAlphanumeric(NextCodePoint(text, &k));
        if (word_before || word_after) continue;
      }
      best = t;
      best_end = e;
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = (*tokens_)[best];
    size_t b = i, e = best_end;
    if (tok.lstrip) {
      while (b > seg_begin) {
        size_t pb;
        if (!IsWhiteSpace(PrevCodePoint(text, b, &pb))) break;
        b = pb;
      }
    }
    if (tok.rstrip) {
      while (e < n) {
        size_t k = e;
        if (!IsWhiteSpace(NextCodePoint(text, &k))) break;
        e = std::min(k, n);
      }
    }
    if (b > seg_begin) out->push_back(Segment{seg_begin, b, -1});
    out->push_back(Segment{b, e, best});
    seg_begin = i = e;
  }
  if (n > seg_begin) out->push_back(Segment{seg_begin, n, -1});
}

}  // namespace tandem::tok
