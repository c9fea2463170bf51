#include "core/text.h"

#include <cstdint>
#include <cstring>

namespace ckptdb {

std::optional<size_t> FirstNonUtf8Byte(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time: keys and tags are mostly ASCII.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      if ((word & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    // The sequence's length and the range of its second byte (RFC 3629,
    // table 3-7 of the Unicode standard): no overlong forms, surrogates or
    // code points above U+10FFFF.
    size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) {
      length = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
      length = 3;
      if (b == 0xe0) low = 0xa0;
      if (b == 0xed) high = 0x9f;
    } else if (b >= 0xf0 && b <= 0xf4) {
      length = 4;
      if (b == 0xf0) low = 0x90;
      if (b == 0xf4) high = 0x8f;
    } else {
      return i;
    }
    if (i + 1 >= n || p[i + 1] < low || p[i + 1] > high) return i;
    for (size_t k = 2; k < length; ++k) {
      if (i + k >= n || (p[i + k] & 0xc0) != 0x80) return i;
    }
    i += length;
  }
  return std::nullopt;
}

std::string PrintableText(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  return out;
}

Status CheckUtf8(std::string_view what, std::string_view text) {
  const std::optional<size_t> at = FirstNonUtf8Byte(text);
  if (!at) return Status::OK();
  return Status::InvalidArgument(
      std::string(what) + " is not UTF-8 text: '" + PrintableText(text) +
      "' (byte " + std::to_string(*at) +
      "); a checkpoint's keys, tags, user metadata and str values are "
      "UTF-8, and binary data goes in bytes values");
}

}  // namespace ckptdb
