#pragma once

// One rank's planning in DB::Load (load.cc), in a header of its own so that
// the planning simulator (bench/plan_sim.cc) runs this code rather than a
// copy.

#include <map>
#include <string>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "engine/collectives/classes.h"
#include "engine/collectives/wire.h"
#include "planner/load_plan.h"

namespace ckptdb::engine {

// What a rank plans for its part of a load.
struct RankLoadPlanning {
  // Every class's targets and placements, every rank's device and the buffer.
  GatheredTargets all;
  // This rank's part of the read plan (planner::BuildRankLoadPlan).
  planner::LoadPlan plan;
};

// From what AllGatherClasses delivered (own: EncodeTargets of the status,
// buffer and device; shared: EncodeTargets of the targets and placements):
// the first failing rank's status, else `rank`'s plan. `tensors` holds every
// tensor of the checkpoint, with chunks at least for the tensors of `rank`'s
// targets. `own_shared`: what `rank` itself encoded as shared (moved from,
// not decoded), or nullptr.
Result<RankLoadPlanning> PlanRankLoad(
    const std::map<std::string, TensorMetadata>& tensors,
    const RankClasses& gathered, int rank, RankTargets* own_shared = nullptr);

}  // namespace ckptdb::engine
