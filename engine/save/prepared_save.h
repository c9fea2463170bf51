#pragma once

#include <cstdint>
#include <vector>

#include "ckptdb/options.h"
#include "ckptdb/types.h"
#include "engine/save/save_layout.h"
#include "planner/save_plan.h"

namespace ckptdb::engine {

// A save between planning and writing: what the background needs, owned.
struct PreparedSave {
  // Views of the caller's memory; not used after a snapshot.
  std::vector<TensorView> views;
  // Every class's layout, this rank's among them.
  planner::SaveClasses classes;
  const planner::RankSaveLayout& own_layout(int rank) const {
    return classes.layouts[classes.class_of_rank[rank]];
  }
  // This rank's part of the plan (planner::BuildClassSavePlan with
  // only_writer); or, when `whole_plan`, every rank's chunks: rank 0 of a
  // blocking save plans the whole save once, before writing, and its commit
  // records that plan (moving it out). A background save plans the whole
  // save at its commit, off the caller's time.
  planner::SavePlan plan;
  bool whole_plan = false;
  SaveOptions options;
  int64_t id = 0;
  // The checkpoints an incremental save compares with, newest first (none:
  // every chunk is written).
  std::vector<int64_t> base_ids;
  std::vector<MyChunk> mine;
  std::vector<size_t> order;  // of `mine`, by storage key: the write order
};

}  // namespace ckptdb::engine
