#pragma once

// Text a checkpoint records (keys, tags, user metadata, str values) is UTF-8,
// as every reader (Python's str, JSON, the CLI) needs it; binary belongs in
// bytes values.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "ckptdb/status.h"

namespace ckptdb {

// The offset of the first byte of `text` that does not begin or continue a
// well-formed UTF-8 sequence (an overlong form, a surrogate, a code point
// above U+10FFFF, a cut-short sequence); nullopt when all of it is UTF-8.
std::optional<size_t> FirstNonUtf8Byte(std::string_view text);

// `text` with each byte outside printable ASCII written as \xNN, for messages
// that quote bytes which may not be text.
std::string PrintableText(std::string_view text);

// OK when `text` is UTF-8; otherwise InvalidArgument naming `what` ("tag",
// "key"), the text (escaped) and the offset of its first bad byte.
Status CheckUtf8(std::string_view what, std::string_view text);

}  // namespace ckptdb
