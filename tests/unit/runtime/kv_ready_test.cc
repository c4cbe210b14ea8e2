// runtime::KvReadyNotification / ParseKvReadyNotification (remote_prefill.h): the kv-ready form
// round-trips (request ids with spaces included); the bare request id and malformed text are not
// taken for it.
#include <gtest/gtest.h>

#include "runtime/remote_prefill.h"

namespace tandem::runtime {
namespace {

TEST(KvReadyNotificationTest, RoundTripsAndRefusesAnythingElse) {
  for (const std::string id : {"cmpl-1", "chatcmpl-abc def", "x"}) {
    for (int32_t token : {0, 7, 151643}) {
      auto r = ParseKvReadyNotification(KvReadyNotification(id, token));
      ASSERT_TRUE(r.has_value()) << id << " " << token;
      EXPECT_EQ(r->request_id, id);
      EXPECT_EQ(r->first_token, token);
    }
  }
  EXPECT_EQ(KvReadyNotification("req-9", 42), "kv-ready 42 req-9");
  for (const char* bad : {"req-9", "kv-ready", "kv-ready 42", "kv-ready 42 ", "kv-ready -1 r", "kv-ready x r",
                          "kv-ready 4x2 r", "kv-ready  r", "KV-READY 1 r", "kv-ready 99999999999 r"}) {
    EXPECT_FALSE(ParseKvReadyNotification(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace tandem::runtime
