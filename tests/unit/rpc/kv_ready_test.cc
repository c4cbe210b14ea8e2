// runtime::KvReadyNotification / ParseKvReadyNotification (remote_prefill.h): the kv-ready form
// round-trips (request ids with spaces included); the bare request id and malformed text are not
// taken for it.
#include <gtest/gtest.h>

#include "rpc/remote_prefill.h"

namespace tandem::runtime {
namespace {

TEST(KvReadyNotificationTest, RoundTripsAndRefusesAnythingElse) {
  for (const std::string id : {"cmpl-1", "chatcmpl-abc def", "x"}) {
    for (int32_t token : {0, 7, 151643}) {
      for (uint64_t call : {uint64_t{0}, uint64_t{5}, ~uint64_t{0}}) {
        auto r = ParseKvReadyNotification(KvReadyNotification(id, call, token));
        ASSERT_TRUE(r.has_value()) << id << " " << token << " " << call;
        EXPECT_EQ(r->request_id, id);
        EXPECT_EQ(r->call_id, call);
        EXPECT_EQ(r->first_token, token);
      }
    }
  }
  EXPECT_EQ(KvReadyNotification("req-9", 3, 42), "kv-ready 42 3 req-9");
  for (const char* bad : {"req-9", "kv-ready", "kv-ready 42", "kv-ready 42 3", "kv-ready 42 3 ", "kv-ready 42 r",
                          "kv-ready -1 3 r", "kv-ready x 3 r", "kv-ready 4x2 3 r", "kv-ready 42 -3 r",
                          "kv-ready  3 r", "KV-READY 1 3 r", "kv-ready 99999999999 3 r",
                          "kv-ready 1 99999999999999999999999 r"}) {
    EXPECT_FALSE(ParseKvReadyNotification(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace tandem::runtime
