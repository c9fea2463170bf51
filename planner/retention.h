#pragma once

// Which checkpoints a retention policy deletes after a commit: a pure
// decision over the store's listing, made by the committing rank.

#include <cstdint>
#include <optional>
#include <vector>

#include "ckptdb/metadata.h"

namespace ckptdb::planner {

struct RetentionPolicy {
  // The newest this many checkpoints (by id, i.e. commit order) are kept;
  // older ones are deleted unless kept for another reason. nullopt keeps
  // every checkpoint. REQUIRES: >= 1.
  std::optional<int64_t> keep_last{};
  // Checkpoints whose step is a multiple of this are always kept.
  // REQUIRES: >= 1.
  std::optional<int64_t> keep_every_steps{};
};

// The ids to delete from `checkpoints` (any order), oldest first: every
// checkpoint older than the newest keep_last, except tagged ones and those
// whose step is a multiple of keep_every_steps. Empty without keep_last.
std::vector<int64_t> CheckpointsToDelete(
    const std::vector<CheckpointInfo>& checkpoints,
    const RetentionPolicy& policy);

}  // namespace ckptdb::planner
