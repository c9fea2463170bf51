#include "dump_common.h"

#include <gtest/gtest.h>

namespace ckptdb::tools {
namespace {

// A store written before saves checked their text may hold a tag, a key or
// user metadata that is not UTF-8: JSON output writes those bytes as U+FFFD
// instead of failing, and text output escapes control characters (a NUL
// would cut a tag short, a newline split a line).
TEST(DumpCommonTest, TextThatIsNotUtf8OrHoldsControlsStaysPrintable) {
  CheckpointInfo info;
  info.id = 2;
  info.tag = std::string("best\xff");
  const std::string text = JsonText(InfoJson(info));
  EXPECT_NE(text.find("\"tag\":\"best\xef\xbf\xbd\""), std::string::npos)
      << text;
  json keyed = json::object();
  keyed[std::string("k\xfe")] = "v";
  EXPECT_EQ(JsonText(keyed), "{\"k\xef\xbf\xbd\":\"v\"}");
  EXPECT_EQ(ValueText(Value(std::string("\xc0"))), "\"\xef\xbf\xbd\"");
  EXPECT_EQ(ControlEscaped(std::string("a\0b\nc\x7f\xc3\xa9", 8)),
            "a\\x00b\\x0ac\\x7f\xc3\xa9");
  // A key holding the four characters \x0a is told apart from a newline.
  EXPECT_EQ(ControlEscaped("\\x0a"), "\\\\x0a");
  EXPECT_NE(ControlEscaped("\\x0a"), ControlEscaped("\n"));
  // C1 controls (the one-byte CSI) and bytes of no character are escaped;
  // characters of 2, 3 and 4 bytes are kept.
  EXPECT_EQ(ControlEscaped("a\xc2\x9b"
                           "31m\xc2\x85"),
            "a\\xc2\\x9b31m\\xc2\\x85");
  EXPECT_EQ(ControlEscaped("\xff\xe2\x82"
                           "x\xed\xa0\x80"),
            "\\xff\\xe2\\x82x\\xed\\xa0\\x80");
  EXPECT_EQ(ControlEscaped("\xc2\xa0\xe2\x82\xac\xf0\x9f\x98\x80"),
            "\xc2\xa0\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(BytesText(Bytes{std::string("\0a'\\\x80", 5)}),
            "b'\\x00a\\'\\\\\\x80'");
}

TEST(DumpCommonTest, ATagThatCouldReadAsNoneOrTwoColumnsIsQuoted) {
  EXPECT_EQ(TagCell(std::nullopt), "-");
  EXPECT_EQ(TagCell("best"), "best");
  EXPECT_EQ(TagCell("it's"), "it's");
  EXPECT_EQ(TagCell(""), "\"\"");
  EXPECT_EQ(TagCell("-"), "\"-\"");
  EXPECT_EQ(TagCell("two words"), "\"two words\"");
  EXPECT_EQ(TagCell("\"q\" x"), "\"\\\"q\\\" x\"");
  EXPECT_EQ(TagCell("a\nb"), "a\\x0ab");
}

TEST(DumpCommonTest, ColumnsArePaddedByTheWidthATerminalShows) {
  EXPECT_EQ(DisplayWidth("plain.weight"), 12u);
  EXPECT_EQ(DisplayWidth("\xc3\xbcmlaut"), 6u);  // ümlaut, 2-byte ü
  EXPECT_EQ(DisplayWidth("u\xcc\x88"), 1u);      // u + combining ¨
  EXPECT_EQ(DisplayWidth("\xe5\xb1\x82.\xe6\x9d\x83"), 5u);  // 层.权: wide
  EXPECT_EQ(DisplayWidth("\xf0\x9f\x98\x80"), 2u);           // an emoji
  EXPECT_EQ(DisplayWidth("\\xff"), 4u);                      // an escaped byte
  EXPECT_EQ(PadToWidth("\xe5\xb1\x82", 4), "\xe5\xb1\x82  ");
  EXPECT_EQ(PadToWidth("\xc3\xa9", 3), "\xc3\xa9  ");
  EXPECT_EQ(PadToWidth("abcdef", 3), "abcdef");
}

}  // namespace
}  // namespace ckptdb::tools
