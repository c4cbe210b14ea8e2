// Parsing untrusted JSON into nlohmann::ordered_json within bounds on nesting and on work.
//
// ordered_json keeps an object's members in a vector (nlohmann::ordered_map): each key inserted is
// compared with every key before it, so an object of n keys costs n (n - 1) / 2 comparisons. A 1 MB
// request body of one 80 k-key object took 4 s to parse, and the 8 MB body limit allows minutes.
// ParseBoundedJson first scans the text (SAX: nothing built) counting those comparisons and the
// depth, and stops at the first bound crossed; only a text within both is then parsed into a value.
// The scan is linear; the parse then costs at most `max_key_compares` comparisons more than linear.
// (nlohmann's parser callback could drop values past a bound, but its DOM builder scans the
// enclosing container at every object's end: an array of n objects costs n^2.)
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tandem {

// 2^26 comparisons: ~0.1 s of parsing on this project's 2-core dev machine; one object of up to
// 11,585 keys, or many smaller ones (1,000 objects of 360 keys). A comparison of a key of n bytes
// counts 1 + n / 16 (long keys of one length sharing a prefix are compared whole): one object of
// 680-byte keys may hold 1,767.
inline constexpr uint64_t kDefaultMaxJsonKeyCompares = uint64_t{1} << 26;

enum class JsonParseError {
  kNone,
  kInvalid,      // not JSON (syntax)
  kTooDeep,      // more than max_depth levels of arrays and objects
  kTooManyKeys,  // objects whose keys would cost more than max_key_compares comparisons
};

struct BoundedJson {
  nlohmann::ordered_json value;  // discarded unless error == kNone
  JsonParseError error = JsonParseError::kNone;
};

// max_depth: the deepest array or object allowed, the top-level value being at depth 0 (an array
// or object starting at depth max_depth is kTooDeep); <= 0: no limit on depth.
BoundedJson ParseBoundedJson(std::string_view text, int max_depth,
                             uint64_t max_key_compares = kDefaultMaxJsonKeyCompares);

}  // namespace tandem
