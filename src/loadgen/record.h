// RequestRecord: what the client saw of one request (one turn of a conversation).
// Times are seconds; `start_s` from the start of the run, the others from the request's start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::bench {

enum class ErrorKind {
  kNone,
  kHttpStatus,   // the server answered with a non-200 status (see http_status)
  kConnection,   // connect / write / read failed, or the peer closed the connection
  kTimeout,      // the request ran past --timeout
  kBadStream,    // 200, but the body was not a valid OpenAI SSE stream (or carried an error event)
};

const char* ErrorKindName(ErrorKind kind);  // "none", "http", "connection", "timeout", "bad_stream"

struct RequestRecord {
  uint64_t item_id = 0;  // the workload item (a conversation); turns share it
  int turn = 0;
  int phase = -1;        // the item's phase (--phases), else -1
  double start_s = 0;    // send time, from the start of the run
  double ttft_s = -1;    // first non-empty content chunk; -1 when none came
  double e2e_s = 0;      // last byte of the response
  std::vector<double> chunk_times_s;  // every non-empty content chunk (the first is ttft_s)
  int expected_input_tokens = 0;      // what the workload built (the server may add a template)
  int expected_output_tokens = 0;     // max_tokens (exact with ignore_eos)
  int prompt_tokens = -1;             // the server's usage; -1 when it sent none
  int completion_tokens = -1;
  int cached_tokens = -1;             // usage.prompt_tokens_details.cached_tokens; -1 when absent
  std::string output_text;            // the concatenated content (multi-turn history)
  ErrorKind error = ErrorKind::kNone;
  int http_status = 0;
  std::string error_message;

  bool ok() const { return error == ErrorKind::kNone; }
  int num_chunks() const { return static_cast<int>(chunk_times_s.size()); }
  // The error's key in reports: "http_503", "connection", "timeout", "bad_stream".
  std::string ErrorKey() const;
};

}  // namespace tandem::bench
