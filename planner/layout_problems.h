#pragma once

#include <string>
#include <vector>

#include "ckptdb/metadata.h"

namespace ckptdb::planner {

// Problems of a stored tensor's layout, one message each naming the tensor and
// chunk: every chunk outside the tensor and every recorded size that does not
// match its box; when there are none, the first of CheckPartition's
// problems (overlapping chunks, a gap, an empty chunk). Empty when the chunks
// partition the tensor exactly.
std::vector<std::string> LayoutProblems(const std::string& key,
                                        const TensorMetadata& t);

}  // namespace ckptdb::planner
