#include "core/text.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

namespace ckptdb {
namespace {

// The UTF-8 encoding of code point `c` (RFC 3629's table).
std::string Encode(uint32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | c >> 6);
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | c >> 12);
    out += static_cast<char>(0x80 | (c >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | c >> 18);
    out += static_cast<char>(0x80 | (c >> 12 & 0x3f));
    out += static_cast<char>(0x80 | (c >> 6 & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
  return out;
}

// UTF-8 by definition: the text splits into encodings of Unicode scalar
// values (code points up to U+10FFFF, no surrogates). Each step reads the
// payload bits of 1-4 bytes and keeps a length whose bytes re-encode the
// value they carry.
bool ReferenceIsUtf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t taken = 0;
    for (size_t len = 1; len <= 4 && i + len <= text.size() && !taken; ++len) {
      const auto lead = static_cast<unsigned char>(text[i]);
      uint32_t c = len == 1 ? lead : lead & (0x7f >> len);
      for (size_t k = 1; k < len; ++k)
        c = c << 6 | (static_cast<unsigned char>(text[i + k]) & 0x3f);
      const bool scalar = c <= 0x10ffff && (c < 0xd800 || c > 0xdfff);
      if (scalar && Encode(c) == text.substr(i, len)) taken = len;
    }
    if (!taken) return false;
    i += taken;
  }
  return true;
}

// Every sequence of one to three bytes, and random ones of four to twelve
// after ASCII runs (the eight-byte fast path), are judged as the definition
// judges them.
TEST(TextTest, FirstNonUtf8ByteAgreesWithTheDefinitionOnEveryShortSequence) {
  for (uint32_t v = 0; v < (1u << 24); ++v) {
    for (size_t len = 1; len <= 3; ++len) {
      if (len < 3 && v >= (1u << (8 * len))) continue;
      std::string s;
      for (size_t k = 0; k < len; ++k) s += static_cast<char>(v >> (8 * k));
      ASSERT_EQ(!FirstNonUtf8Byte(s).has_value(), ReferenceIsUtf8(s))
          << PrintableText(s);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    std::string s(rng() % 9, 'a');
    const size_t tail = 4 + rng() % 9;
    for (size_t k = 0; k < tail; ++k) {
      // Mostly lead and continuation bytes, some ASCII.
      const uint32_t r = rng();
      s += static_cast<char>(r % 4 == 0 ? r >> 8 & 0x7f
                                        : 0x80 | (r >> 8 & 0x7f));
    }
    ASSERT_EQ(!FirstNonUtf8Byte(s).has_value(), ReferenceIsUtf8(s))
        << PrintableText(s);
  }
}

TEST(TextTest, CheckUtf8NamesTheTextAndItsFirstBadByte) {
  EXPECT_TRUE(CheckUtf8("tag", "").ok());
  EXPECT_TRUE(
      CheckUtf8("tag", "caf\xc3\xa9 \xf0\x9f\x98\x80 long ascii run").ok());
  EXPECT_TRUE(CheckUtf8("tag", std::string("a\0b", 3)).ok());
  const Status s = CheckUtf8("tag", "best\xff\xfe");
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_EQ(s.message().substr(0, 46),
            "tag is not UTF-8 text: 'best\\xff\\xfe' (byte 4)");
  EXPECT_EQ(FirstNonUtf8Byte("abcdefghij\xed\xa0\x80"), 10u);  // a surrogate
  EXPECT_EQ(FirstNonUtf8Byte("\xc0\xaf"), 0u);                 // overlong '/'
  EXPECT_EQ(FirstNonUtf8Byte("ab\xf4\x90\x80\x80"), 2u);       // above U+10FFFF
  EXPECT_EQ(FirstNonUtf8Byte("abc\xe2\x82"), 3u);              // cut short
}

}  // namespace
}  // namespace ckptdb
