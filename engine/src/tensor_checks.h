#pragma once

#include <string>

#include "ckptdb/types.h"

namespace ckptdb::engine {

// Checks what only the owning rank can: the view's ranks agree, its box lies
// inside its global shape, its memory is host memory and present when it holds
// bytes.
Status CheckView(const std::string& flat_key, const TensorView& view);

}  // namespace ckptdb::engine
