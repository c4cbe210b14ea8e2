// ShareGPT and Mooncake trace parsing (workload.h).
#include <nlohmann/json.hpp>

#include "loadgen/workload.h"

namespace tandem::bench {

uint64_t MixSeed(uint64_t a, uint64_t b);

Result<std::vector<WorkItem>> LoadShareGpt(const std::string& json_text, const Tokenizer& tokenizer,
                                           const WorkloadOptions& options) {
  nlohmann::json root = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_array())
    return Err(StatusCode::kInvalidArgument, "ShareGPT: expected a JSON array of conversations");
  std::mt19937_64 rng(MixSeed(options.seed, 11));
  std::vector<WorkItem> items;
  for (const auto& entry : root) {
    if (!entry.is_object() || !entry.contains("conversations") || !entry["conversations"].is_array())
      continue;
    const auto& conv = entry["conversations"];
    WorkItem item;
    int total = 0;
    for (size_t i = 0; i + 1 < conv.size() && static_cast<int>(item.turns.size()) < std::max(1, options.num_turns); ++i) {
      const auto& human = conv[i];
      const auto& gpt = conv[i + 1];
      auto role = [](const nlohmann::json& m) {
        return m.is_object() && m.contains("from") && m["from"].is_string() ? m["from"].get<std::string>() : "";
      };
      auto value = [](const nlohmann::json& m) {
        return m.contains("value") && m["value"].is_string() ? m["value"].get<std::string>() : "";
      };
      if (role(human) != "human" || role(gpt) != "gpt") continue;
      Turn turn;
      turn.text = value(human);
      turn.input_tokens = static_cast<int>(tokenizer.Encode(turn.text).size());
      turn.output_tokens = options.output_len_given
                               ? options.output_len.Sample(rng)
                               : static_cast<int>(tokenizer.Encode(value(gpt)).size());
      if (turn.input_tokens < 1 || turn.output_tokens < 1) break;
      total += turn.input_tokens + turn.output_tokens;
      if (options.max_model_len > 0 && total > options.max_model_len) break;
      item.turns.push_back(std::move(turn));
      ++i;  // past the reply
    }
    if (!item.turns.empty()) items.push_back(std::move(item));
  }
  return items;
}

Result<std::vector<MooncakeEntry>> ParseMooncake(const std::string& jsonl_text) {
  std::vector<MooncakeEntry> entries;
  size_t start = 0;
  int line_no = 0;
  while (start < jsonl_text.size()) {
    size_t end = jsonl_text.find('\n', start);
    if (end == std::string::npos) end = jsonl_text.size();
    std::string line = jsonl_text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    auto bad = [&](const char* what) {
      return Err(StatusCode::kInvalidArgument, "line {}: {}", line_no, what);
    };
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    MooncakeEntry e;
    if (!j.contains("timestamp") || !j["timestamp"].is_number()) return bad("no numeric timestamp");
    if (!j.contains("input_length") || !j["input_length"].is_number_integer())
      return bad("no integer input_length");
    if (!j.contains("output_length") || !j["output_length"].is_number_integer())
      return bad("no integer output_length");
    e.timestamp_ms = j["timestamp"].get<double>();
    e.input_length = j["input_length"].get<int>();
    e.output_length = j["output_length"].get<int>();
    if (e.input_length < 1 || e.output_length < 0) return bad("lengths out of range");
    if (j.contains("hash_ids")) {
      if (!j["hash_ids"].is_array()) return bad("hash_ids is not an array");
      for (const auto& h : j["hash_ids"]) {
        if (!h.is_number_integer()) return bad("hash_ids holds a non-integer");
        e.hash_ids.push_back(h.get<uint64_t>());
      }
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

std::string MooncakePrompt(const MooncakeEntry& entry, int block_size, const PromptVocab& vocab,
                           uint64_t seed, uint64_t item_id) {
  std::string text;
  int remaining = entry.input_length;
  for (uint64_t h : entry.hash_ids) {
    if (remaining <= 0) break;
    const int n = std::min(block_size, remaining);
    text += vocab.Words(n, MixSeed(seed ^ 0xb10c, h));
    remaining -= n;
  }
  if (remaining > 0) text += vocab.Words(remaining, MixSeed(seed ^ 0xf111, item_id));
  return text;
}

}  // namespace tandem::bench
