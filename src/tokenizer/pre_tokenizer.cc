#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <cstdlib>

#include <utf8proc.h>

namespace tandem::tok {

namespace {

// The GPT-2 pattern ByteLevel uses when use_regex is true.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string TypeOf(const nlohmann::json& j) {
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string("<no type>");
}

}  // namespace

// ---- Normalizer ----

Result<Normalizer> Normalizer::FromJson(const nlohmann::json& j) {
  Normalizer n;
  if (j.is_null()) return n;
  if (!j.is_object()) return Err(StatusCode::kInvalidArgument, "tokenizer.json: normalizer is not an object");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    for (const auto& sub : j.at("normalizers")) {
      TANDEM_ASSIGN_OR_RETURN(Normalizer s, FromJson(sub));
      n.steps_.insert(n.steps_.end(), s.steps_.begin(), s.steps_.end());
    }
    return n;
  }
  if (type == "NFC") {
    n.steps_.push_back(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  } else if (type == "NFD") {
    n.steps_.push_back(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  } else if (type == "NFKC") {
    n.steps_.push_back(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  } else if (type == "NFKD") {
    n.steps_.push_back(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  } else {
    return Err(StatusCode::kInvalidArgument, "tokenizer.json: unsupported normalizer type '{}'", type);
  }
  return n;
}

std::string Normalizer::Normalize(std::string_view text) const {
  std::string cur(text);
  for (int options : steps_) {
    // Code points below U+0300 are unchanged by NFC and NFD (and never combine with a
    // predecessor); such text (lead bytes < 0xCC) skips the canonical forms.
    if (!(options & UTF8PROC_COMPAT)) {
      bool simple = true;
      for (unsigned char c : cur) {
        if (c >= 0xCC) {
          simple = false;
          break;
        }
      }
      if (simple) continue;
    }
    utf8proc_uint8_t* dst = nullptr;
    const utf8proc_ssize_t len =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()), static_cast<utf8proc_ssize_t>(cur.size()),
                     &dst, static_cast<utf8proc_option_t>(options));
    if (len >= 0) cur.assign(reinterpret_cast<const char*>(dst), static_cast<size_t>(len));
    std::free(dst);
  }
  return cur;
}

// ---- PreTokenizer ----

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const nlohmann::json& j) {
  auto pt = std::unique_ptr<PreTokenizer>(new PreTokenizer());
  if (!j.is_null()) TANDEM_RETURN_IF_ERROR(pt->AddFromJson(j));
  return pt;
}

Status PreTokenizer::AddFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return Err(StatusCode::kInvalidArgument, "tokenizer.json: pre_tokenizer is not an object");
  const std::string type = TypeOf(j);
  if (type == "Sequence") {
    for (const auto& sub : j.at("pretokenizers")) TANDEM_RETURN_IF_ERROR(AddFromJson(sub));
    return Status::Ok();
  }
  Step step;
  if (type == "Split") {
    const auto& pattern = j.at("pattern");
    Result<std::unique_ptr<Regex>> re = Status(StatusCode::kInvalidArgument, "tokenizer.json: Split without pattern");
    if (pattern.contains("Regex")) {
      re = Regex::Compile(pattern.at("Regex").get<std::string>());
    } else if (pattern.contains("String")) {
      re = Regex::Compile(pattern.at("String").get<std::string>(), /*literal=*/true);
    }
    if (!re.ok()) return re.status();
    step.regex = std::move(re).value();
    const std::string behavior = j.value("behavior", std::string("Isolated"));
    if (behavior == "Removed") {
      step.behavior = Behavior::kRemoved;
    } else if (behavior == "Isolated") {
      step.behavior = Behavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = Behavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = Behavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = Behavior::kContiguous;
    } else {
      return Err(StatusCode::kInvalidArgument, "tokenizer.json: unsupported Split behavior '{}'", behavior);
    }
    step.invert = j.value("invert", false);
  } else if (type == "ByteLevel") {
    step.add_prefix_space = j.value("add_prefix_space", true);
    if (j.value("use_regex", true)) {
      TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Regex> re, Regex::Compile(kGpt2Pattern));
      step.regex = std::move(re);
    }
  } else {
    return Err(StatusCode::kInvalidArgument, "tokenizer.json: unsupported pre_tokenizer type '{}'", type);
  }
  steps_.push_back(std::move(step));
  return Status::Ok();
}

void PreTokenizer::ApplyStep(const Step& step, std::string_view piece, std::vector<std::string>* out) {
  std::string prefixed;
  if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  if (!step.regex) {
    if (!piece.empty()) out->emplace_back(piece);
    return;
  }
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  step.regex->FindAll(piece, &matches);
  // (span, is_match) covering the piece, as HF's NormalizedString::split builds it.
  struct Span {
    size_t b, e;
    bool is_match;
  };
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, step.invert});
    spans.push_back({b, e, !step.invert});
    prev = e;
  }
  if (prev < piece.size()) spans.push_back({prev, piece.size(), step.invert});

  std::vector<Span> merged;
  switch (step.behavior) {
    case Behavior::kIsolated:
      merged = std::move(spans);
      break;
    case Behavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) merged.push_back(s);
      }
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !merged.empty()) {
          merged.back().e = s.e;
        } else {
          merged.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !merged.empty()) {
          merged.back().b = it->b;
        } else {
          merged.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && previous_match && !merged.empty()) {
          merged.back().e = s.e;
        } else {
          merged.push_back(s);
        }
        previous_match = s.is_match;
      }
      break;
    }
  }
  for (const Span& s : merged) {
    if (s.e > s.b) out->emplace_back(piece.substr(s.b, s.e - s.b));
  }
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string>* pieces) const {
  if (text.empty()) return;
  std::vector<std::string> cur{std::string(text)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (const std::string& piece : cur) ApplyStep(step, piece, &next);
    cur.swap(next);
  }
  for (std::string& p : cur) pieces->push_back(std::move(p));
}

}  // namespace tandem::tok
