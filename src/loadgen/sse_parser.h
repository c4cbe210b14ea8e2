// SseParser: incremental parser of a text/event-stream body (WHATWG HTML "server-sent events").
//
// Bytes arrive in arbitrary pieces (a TCP read may end inside a line or hold several events);
// Feed() returns the events completed by those bytes. Lines end with "\n", "\r\n" or "\r"; a blank
// line ends an event; "data:" lines (one optional space after the colon removed) are joined with
// "\n"; "event:" names the event; lines starting with ":" are comments; other fields are ignored.
// An event without data lines is not dispatched (as in the spec).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::bench {

struct SseEvent {
  std::string event;  // "" when no "event:" line (the spec's default type "message")
  std::string data;
};

class SseParser {
 public:
  std::vector<SseEvent> Feed(std::string_view bytes);
  // At end of stream: an event whose blank line never came (lenient: servers that end the body
  // right after the last data line). Empty when nothing is pending.
  std::vector<SseEvent> Finish();

 private:
  void Line(std::string_view line, std::vector<SseEvent>& out);
  std::string line_;          // the incomplete line so far
  bool after_cr_ = false;     // the last byte was "\r": a following "\n" belongs to it
  std::string event_, data_;
  bool has_data_ = false;
};

}  // namespace tandem::bench
