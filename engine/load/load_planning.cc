#include "engine/load/load_planning.h"

namespace ckptdb::engine {

Result<RankLoadPlanning> PlanRankLoad(
    const std::map<std::string, TensorMetadata>& tensors,
    const RankClasses& gathered, int rank, RankTargets* own_shared) {
  RankLoadPlanning out;
  CKPTDB_ASSIGN_OR_RETURN(out.all,
                          DecodeTargetClasses(gathered, rank, own_shared));
  CKPTDB_RETURN_IF_ERROR(FirstError(out.all.statuses));
  CKPTDB_ASSIGN_OR_RETURN(
      out.plan, planner::BuildRankLoadPlan(tensors, out.all.classes, rank));
  return out;
}

}  // namespace ckptdb::engine
