// Literals the lexer refuses: every malformed escape or number is a Parse error with a message,
// never an exception out of ChatTemplate::Parse.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "chat/template.h"

namespace tandem {
namespace {

Status ParseStatus(const std::string& source) {
  Result<ChatTemplate> t = Status(StatusCode::kInternal, "not run");
  EXPECT_NO_THROW(t = ChatTemplate::Parse(source)) << source;
  return t.status();
}

// Found by tests/fuzz/chat_template_fuzz: "\u" followed by non-hex characters made std::stoul
// throw invalid_argument out of Parse (ChatRenderer::Load would have ended the process).
TEST(ChatLiteralError, BadEscapesAreParseErrors) {
  for (const char* source : {R"({{ '\uor (m' }})", R"({{ "\xZZ" }})", R"({{ '\x4Z' }})", R"({{ '\U0011000' }})",
                             R"({{ '\U00110000' }})", R"({{ '\u12' }})"}) {
    Status st = ParseStatus(source);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << source;
    EXPECT_NE(st.message().find("bad escape"), std::string::npos) << source << ": " << st.message();
  }
  auto t = ChatTemplate::Parse(R"({{ '\x41\u00e9\U0001F600\U0010FFFF' }})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render(nlohmann::ordered_json::object());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "A\xc3\xa9\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf");
}

// std::stoll / std::stod threw out_of_range for literals beyond their range.
TEST(ChatLiteralError, NumbersBeyondRange) {
  Status st = ParseStatus("{{ 99999999999999999999 }}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.message();
  auto t = ChatTemplate::Parse("{{ 1e999 > 1e308 }} {{ 1e-999 == 0.0 }} {{ 9223372036854775807 }}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render(nlohmann::ordered_json::object());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "True True 9223372036854775807");
}

TEST(ChatLiteralError, FuzzerInputParsesOrFailsCleanly) {
  std::ifstream in(std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/fuzz/corpus/chat_template/regress-bad-unicode-escape",
                   std::ios::binary);
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ParseStatus(ss.str().substr(1)).ok());  // after the fuzz target's selector byte
}

}  // namespace
}  // namespace tandem
