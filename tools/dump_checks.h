#pragma once

#include <string>
#include <vector>

#include "ckptdb/metadata.h"

namespace ckptdb::tools {

// Problems of a stored tensor's layout, one message each naming the tensor and
// chunk: chunks outside the tensor, recorded sizes that do not match their
// boxes, overlapping chunks, or chunks that leave a gap. Empty when the chunks
// partition the tensor exactly.
std::vector<std::string> LayoutProblems(const std::string& key,
                                        const TensorMetadata& t);

}  // namespace ckptdb::tools
