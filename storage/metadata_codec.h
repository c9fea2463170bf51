#pragma once

#include <string>
#include <string_view>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"

namespace ckptdb::storage {

inline constexpr uint32_t kFormatVersion = 1;

// Serializes a checkpoint's metadata as a Cap'n Proto message (flat array of
// words).
std::string EncodeCheckpoint(const CheckpointMetadata& meta);

// Parses and validates a record from an untrusted source: traversal and nesting
// limits, the format version, every dtype, shape, offset, size and rank are
// checked before use. Any defect gives Corruption (never a crash). Chunks come
// back sorted by global offset.
Result<CheckpointMetadata> DecodeCheckpoint(std::string_view bytes);

// Only the summary fields; cheaper than DecodeCheckpoint for listings.
Result<CheckpointInfo> DecodeCheckpointInfo(std::string_view bytes);

}  // namespace ckptdb::storage
