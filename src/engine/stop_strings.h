// StopStringMatcher: finds stop strings in streamed text without ever letting one leak.
//
// Text arrives in pieces (whole UTF-8 characters). A piece's text is released only when it cannot
// be the start of a stop string: the longest tail of the unreleased text that is a prefix of some
// stop string is held back until more text decides it. When a stop string appears, the text before
// its first occurrence is released and the rest (the stop string included) is dropped, as vLLM
// does with include_stop_str_in_output = false.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;      // releasable now
    bool stopped = false;  // a stop string was found; feed nothing more
  };
  Result Push(std::string_view text);
  // The held-back text, when generation ends for another reason.
  std::string Flush();

  bool empty() const { return stops_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace tandem
