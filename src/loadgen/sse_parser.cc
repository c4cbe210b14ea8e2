#include "loadgen/sse_parser.h"

namespace tandem::bench {

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the "\n" of "\r\n"
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      Line(line_, out);
      line_.clear();
    } else {
      line_ += c;
    }
  }
  return out;
}

std::vector<SseEvent> SseParser::Finish() {
  std::vector<SseEvent> out;
  if (!line_.empty()) Line(line_, out);
  line_.clear();
  Line("", out);
  return out;
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    if (has_data_) out.push_back(SseEvent{std::move(event_), std::move(data_)});
    event_.clear();
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment
  std::string_view field = line, value;
  if (size_t colon = line.find(':'); colon != std::string_view::npos) {
    field = line.substr(0, colon);
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  } else if (field == "event") {
    event_ = std::string(value);
  }
}

}  // namespace tandem::bench
