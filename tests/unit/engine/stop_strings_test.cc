#include "engine/stop_strings.h"

#include <gtest/gtest.h>

namespace tandem {
namespace {

TEST(StopStrings, NoStopsPassesThrough) {
  StopStringMatcher m({});
  EXPECT_EQ(m.Push("abc").text, "abc");
  EXPECT_EQ(m.Flush(), "");
}

TEST(StopStrings, HoldsBackPossibleStartAndCutsTheStop) {
  StopStringMatcher m({"STOP"});
  auto r = m.Push("hello S");
  EXPECT_EQ(r.text, "hello ");  // "S" may start STOP
  EXPECT_FALSE(r.stopped);
  r = m.Push("T");
  EXPECT_EQ(r.text, "");
  r = m.Push("OP and more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");  // the stop string and what follows are dropped
  EXPECT_EQ(m.Push("x").text, "");
}

TEST(StopStrings, FalseStartIsReleased) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(m.Push("ST").text, "");
  auto r = m.Push("ART");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(r.text, "START");
  EXPECT_EQ(m.Push("ST").text, "");
  EXPECT_EQ(m.Flush(), "ST");  // generation ended otherwise: held text comes out
}

TEST(StopStrings, EarliestOfSeveral) {
  StopStringMatcher m({"world", "lo w"});
  auto r = m.Push("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "hel");
}

TEST(StopStrings, StopInsideOnePiece) {
  StopStringMatcher m({"\n\n"});
  auto r = m.Push("a\n");
  EXPECT_EQ(r.text, "a");
  r = m.Push("\nb");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
}

}  // namespace
}  // namespace tandem
