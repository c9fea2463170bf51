#pragma once

// Format 2's packed chunk boxes (TensorChunks.boxes; the byte layout is
// described in storage/checkpoint.capnp). Pure; private to storage/.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "core/error_name.h"

namespace ckptdb::storage {

// Dimensions and extents a record may hold.
inline constexpr size_t kMaxDims = kMaxTensorDims;
inline constexpr int64_t kMaxExtent = kMaxTensorExtent;

// The global offsets, local shapes and writer ranks of `chunks`, in this
// order (sorted by global offset, the predictions hit on regular grids), of a
// tensor of `global_shape`. REQUIRES: every chunk has global_shape.size()
// dimensions (missing ones are written as 0).
std::string EncodeBoxStream(const Shape& global_shape,
                            std::span<const ChunkMetadata* const> chunks);

// Decodes chunks->size() chunks' global offsets, local shapes and writer
// ranks from `bytes`, and sets each nbytes to its volume * `elem_size`.
// Corruption starting with `what` (a tensor's name) when a varint is cut or
// too long, an offset or extent lies outside [0, 2^48], a volume overflows, a
// writer rank is outside [0, world_size), flags are unknown, or bytes follow
// the last chunk. Where the boxes lie relative to each other is not checked
// (planner::CheckPartition's). REQUIRES: global_shape.size() <= kMaxDims.
Status DecodeBoxStream(std::string_view bytes, const Shape& global_shape,
                       size_t elem_size, int32_t world_size,
                       const ErrorName& what,
                       std::vector<ChunkMetadata>* chunks);

// Multiplies `elem` by the extents, failing on overflow past 2^62.
bool CheckedVolume(const Shape& shape, uint64_t elem, uint64_t* out);

}  // namespace ckptdb::storage
