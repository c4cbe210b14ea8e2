#include "common/json_limits.h"

#include <vector>

namespace tandem {

BoundedJson ParseBoundedJson(std::string_view text, int max_depth, uint64_t max_key_compares) {
  using ojson = nlohmann::ordered_json;
  JsonParseError error = JsonParseError::kNone;
  uint64_t compares = 0;
  std::vector<uint64_t> keys;  // members so far of each open object (every one kept until an error)
  auto guard = [&](int depth, ojson::parse_event_t event, ojson&) {
    if (error != JsonParseError::kNone) return false;  // dropped: nothing more is built
    switch (event) {
      case ojson::parse_event_t::object_start:
      case ojson::parse_event_t::array_start:
        if (max_depth > 0 && depth >= max_depth) {
          error = JsonParseError::kTooDeep;
          return false;
        }
        if (event == ojson::parse_event_t::object_start) keys.push_back(0);
        return true;
      case ojson::parse_event_t::key:
        // nlohmann's ordered_map finds the key among the object's members before adding it.
        compares += keys.empty() ? 0 : keys.back()++;
        if (compares > max_key_compares) {
          error = JsonParseError::kTooManyKeys;
          return false;
        }
        return true;
      case ojson::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        return true;
      default:
        return true;
    }
  };
  BoundedJson out;
  out.value = ojson::parse(text.begin(), text.end(), guard, /*allow_exceptions=*/false);
  out.error = error;
  if (error == JsonParseError::kNone && out.value.is_discarded()) out.error = JsonParseError::kInvalid;
  if (out.error != JsonParseError::kNone) out.value = ojson(ojson::value_t::discarded);
  return out;
}

}  // namespace tandem
