// ClientText (errors.h): client text echoed into logs and error messages is escaped and bounded.
#include "frontend/errors.h"

#include <string>

#include <gtest/gtest.h>

namespace tandem::http {
namespace {

TEST(ClientTextTest, EscapesControlCharacters) {
  EXPECT_EQ(ClientText("x\n2026-12-01T00:00:00.000 error FAKE \x1b[31mred\r\t\x7f"),
            "x\\n2026-12-01T00:00:00.000 error FAKE \\x1b[31mred\\r\\t\\x7f");
  EXPECT_EQ(ClientText(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(ClientText("\xc2\x9b" "31m"), "\\u009b31m");  // C1 CSI
  EXPECT_EQ(ClientText("bad \xff\xc3"), "bad \\xff\\xc3");  // not UTF-8
  EXPECT_EQ(ClientText("w\xc3\xb6rld \xe4\xb8\x96 \xf0\x9f\x8e\x89 ok"),
            "w\xc3\xb6rld \xe4\xb8\x96 \xf0\x9f\x8e\x89 ok");
  EXPECT_EQ(ClientText(""), "");
}

TEST(ClientTextTest, TruncatesOnACharacterBoundary) {
  const std::string big(7u << 20, 'a');
  EXPECT_EQ(ClientText(big), std::string(256, 'a') + "...");
  EXPECT_EQ(ClientText(std::string(256, 'a')), std::string(256, 'a'));
  // 255 ASCII bytes then a 2-byte character: it does not fit whole, so it is left out.
  EXPECT_EQ(ClientText(std::string(255, 'a') + "\xc3\xb6"), std::string(255, 'a') + "...");
  EXPECT_EQ(ClientText("abcdef", 3), "abc...");
}

}  // namespace
}  // namespace tandem::http
