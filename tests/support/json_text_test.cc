// SPDX-License-Identifier: Apache-2.0
// The one JSON string escaper: quotes, backslashes and every control character are escaped;
// other bytes (UTF-8 included) pass through.
#include "support/json_text.h"

#include <gtest/gtest.h>

namespace shapevm {
namespace {

TEST(JsonText, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(jsonString(""), "\"\"");
  EXPECT_EQ(jsonString("matmul+add"), "\"matmul+add\"");
  EXPECT_EQ(jsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(jsonString("l1\nl2\tx\r"), "\"l1\\nl2\\tx\\r\"");
  EXPECT_EQ(jsonString(std::string_view("\x01\x1f\0", 3)), "\"\\u0001\\u001f\\u0000\"");
  EXPECT_EQ(jsonString("\x7f caf\xc3\xa9"), "\"\x7f caf\xc3\xa9\"");
}

TEST(JsonText, AppendsAfterWhatIsThere) {
  std::string out = "{\"k\": ";
  appendJsonString(out, "v\"");
  EXPECT_EQ(out, "{\"k\": \"v\\\"\"");
}

}  // namespace
}  // namespace shapevm
