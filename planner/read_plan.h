#pragma once

#include <string>
#include <vector>

#include "ckptdb/box.h"
#include "ckptdb/metadata.h"
#include "ckptdb/status.h"

namespace ckptdb::planner {

// The part of one stored chunk that a box read needs.
struct ChunkPart {
  // Index into the tensor's chunks.
  size_t chunk = 0;
  // The chunk's elements inside the box, in the tensor's index space.
  Box common;

  friend bool operator==(const ChunkPart&, const ChunkPart&) = default;
};

// A read of part of one stored tensor (DB::Read with an index).
struct BoxReadPlan {
  // The elements read, in the tensor's index space.
  Box box;
  // The result's shape: box.shape without the dimensions that single
  // positions of the index dropped (same elements, same row-major order).
  Shape result_shape;
  // Every chunk holding an element of `box`, ascending, with that part; no
  // other chunk.
  std::vector<ChunkPart> parts;
};

// The box `index` selects in a tensor of `shape`, numpy's way: negative
// positions count from the end, missing trailing entries take whole
// dimensions, a range's bounds are clamped to its dimension (one whose start
// lies at or after its stop selects nothing). InvalidArgument naming `key`,
// the shape and the index when the index has more entries than the tensor
// has dimensions, a step other than 1, a single position outside the tensor,
// or an exact range (IndexEntry::Exact) that does not lie inside it.
Result<BoxReadPlan> ResolveIndex(const std::string& key, const Shape& shape,
                                 const TensorIndex& index);

// The plan of reading `index` of the stored tensor `key`: ResolveIndex, then
// the chunks meeting the box, found through a BoxIndex (candidates only, not
// every chunk). REQUIRES: the chunks lie inside the tensor.
Result<BoxReadPlan> PlanBoxRead(const std::string& key,
                                const TensorMetadata& tensor,
                                const TensorIndex& index);

}  // namespace ckptdb::planner
