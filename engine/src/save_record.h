#pragma once

// The metadata record of a save, as rank 0 builds it before the commit
// (DB::Save, save.cc). Internal; a header of its own so that the planning
// simulator (bench/plan_sim.cc) runs this code rather than a copy.

#include <cstdint>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/options.h"
#include "ckptdb/status.h"
#include "planner/save_plan.h"

namespace ckptdb::engine {

// The record rank 0 commits: the plan's tensors with the checksums each writer
// reported (`sums_by_rank[rank]`, in plan order of its chunks). Internal when
// a rank reported fewer checksums than it has chunks. Takes the chunks' boxes
// from `plan`, tensor by tensor, so that the whole plan and the whole record
// are not held at once.
Result<CheckpointMetadata> CommitRecord(
    planner::SavePlan plan, int64_t id, const SaveOptions& options, int world,
    const std::vector<std::vector<uint64_t>>& sums_by_rank);

}  // namespace ckptdb::engine
