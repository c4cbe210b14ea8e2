#include "common/json_limits.h"

#include <string>
#include <vector>

namespace tandem {
namespace {

using ojson = nlohmann::ordered_json;

// A first pass over the text (nlohmann's SAX interface: no values built) that stops at the first
// bound crossed. nlohmann's parser-callback DOM parser is no way to bound the second pass: its
// end_object scans the enclosing container for discarded values, quadratic in an array of objects
// (160 k messages took 4 s).
class LimitScan {
 public:
  LimitScan(int max_depth, uint64_t max_key_compares) : max_depth_(max_depth), max_compares_(max_key_compares) {}
  JsonParseError error() const { return error_; }

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(ojson::number_integer_t) { return true; }
  bool number_unsigned(ojson::number_unsigned_t) { return true; }
  bool number_float(ojson::number_float_t, const std::string&) { return true; }
  bool string(std::string&) { return true; }
  bool binary(ojson::binary_t&) { return true; }
  bool start_object(std::size_t) {
    keys_.push_back(0);
    return Open();
  }
  bool key(std::string& k) {
    // nlohmann's ordered_map compares the key with the object's earlier ones before adding it; a
    // comparison of long keys of one length with a common prefix reads them whole, so each counts
    // one more unit per 16 bytes of the key (keys under 16 bytes: one).
    compares_ += keys_.back()++ * (1 + k.size() / 16);
    if (compares_ <= max_compares_) return true;
    error_ = JsonParseError::kTooManyKeys;
    return false;
  }
  bool end_object() {
    keys_.pop_back();
    --open_;
    return true;
  }
  bool start_array(std::size_t) { return Open(); }
  bool end_array() {
    --open_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    error_ = JsonParseError::kInvalid;
    return false;
  }

 private:
  bool Open() {
    if (max_depth_ > 0 && open_ >= max_depth_) {
      error_ = JsonParseError::kTooDeep;
      return false;
    }
    ++open_;
    return true;
  }

  int max_depth_;
  uint64_t max_compares_;
  int open_ = 0;  // arrays and objects open: the depth of the next one
  uint64_t compares_ = 0;
  std::vector<uint64_t> keys_;  // members so far of each open object
  JsonParseError error_ = JsonParseError::kNone;
};

}  // namespace

BoundedJson ParseBoundedJson(std::string_view text, int max_depth, uint64_t max_key_compares) {
  BoundedJson out;
  out.value = ojson(ojson::value_t::discarded);
  LimitScan scan(max_depth, max_key_compares);
  if (!ojson::sax_parse(text.begin(), text.end(), &scan)) {
    out.error = scan.error() == JsonParseError::kNone ? JsonParseError::kInvalid : scan.error();
    return out;
  }
  // Within the bounds: the plain DOM parse (no callback), its key comparisons bounded by the scan.
  out.value = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (out.value.is_discarded()) out.error = JsonParseError::kInvalid;
  return out;
}

}  // namespace tandem
