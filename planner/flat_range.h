#pragma once

#include <cstdint>
#include <vector>

#include "ckptdb/types.h"
#include "core/box_geometry.h"

namespace ckptdb::planner {

// The boxes whose union is exactly the elements [begin, end) of the row-major
// flattening of an array of `shape`, in flat order. Each box is
// one contiguous run of the flattening (leading extents 1, then one partial
// dimension, then whole dimensions), so box k holds the elements
// [FlatIndex(shape, box.origin), + box.volume()) of the range. A box is as
// large as the range allows: at most two boxes per dimension but the first
// (a head and a tail around one middle box), 2 * ndim - 1 in all (1 for a 0-d
// shape), none empty but for an empty range: it gives one empty box at the
// origin (extent 0 in the first dimension), so that its holder still names
// the tensor (an empty tensor is saved; a gap is reported); none for a 0-d
// shape.
// REQUIRES: 0 <= begin <= end <= NumElements(shape).
std::vector<Box> FlatRangeBoxes(const Shape& shape, int64_t begin, int64_t end);

// The row-major position of `coord` in an array of `shape`.
// REQUIRES: coord.size() == shape.size().
int64_t FlatIndex(const Shape& shape, const Shape& coord);

}  // namespace ckptdb::planner
