#pragma once

#include <vector>

#include "ckptdb/types.h"

namespace ckptdb::engine {

// The box views Save and Load work on for one view of a state dict: a box
// view as it is; a flat range as one view per box of its decomposition
// (planner::FlatRangeBoxes), each pointing at its part of the flat buffer,
// with the strides that part has there (none when the buffer is dense).
// REQUIRES: CheckView(view) passed.
std::vector<TensorView> BoxViews(const TensorView& view);

}  // namespace ckptdb::engine
