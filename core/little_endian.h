#pragma once

// Fixed-width integers as little-endian bytes: the byte order of every number
// in ckptdb's own files (value pointers, table properties, the commit journal,
// metadata copies), whatever the machine's, so that a store moves between
// machines as bytes.

#include <cstddef>
#include <string>
#include <type_traits>

namespace ckptdb {

// Appends the sizeof(T) bytes of `v`, least significant first.
template <typename T>
void PutLittleEndian(std::string* out, T v) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  const U u = static_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i)
    out->push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

// The T whose sizeof(T) bytes, least significant first, start at `p`.
template <typename T>
T GetLittleEndian(const char* p) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    u |= static_cast<U>(static_cast<U>(static_cast<unsigned char>(p[i]))
                        << (8 * i));
  return static_cast<T>(u);
}

}  // namespace ckptdb
