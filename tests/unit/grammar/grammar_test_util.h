// Shared by the grammar tests: the JSON grammar of tests/grammar/json.gbnf (RFC 8259 in GBNF).
#pragma once

#include <fstream>
#include <iterator>
#include <string>

#include <gtest/gtest.h>

namespace tandem::grammar::testing {

inline std::string JsonGbnf() {
  std::ifstream in(TANDEM_TESTS_DIR "/grammar/json.gbnf");
  EXPECT_TRUE(in) << "tests/grammar/json.gbnf";
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace tandem::grammar::testing
