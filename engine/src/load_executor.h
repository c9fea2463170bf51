#pragma once

#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/db.h"
#include "planner/load_plan.h"
#include "storage/store.h"

namespace ckptdb::engine {

// What one rank needs to carry out its part of a load plan.
struct LoadExecution {
  const CheckpointMetadata& meta;
  const planner::LoadPlan& plan;
  // This rank's targets, indexed like the LoadTargets it contributed to the
  // plan.
  const std::vector<TensorView*>& targets;
  storage::Store& store;
  Communicator& comm;
  int io_threads;
};

// Carries out this rank's part of `plan`, collectively: reads the chunks it is
// the reader of (in parallel, checksums verified), copies their slices straight
// into local targets (converting dtypes where they differ), and exchanges the
// slices other ranks need. Every rank returns the same status; on error,
// targets may be partly filled.
Status ExecuteLoad(const LoadExecution& execution, LoadStats* stats);

}  // namespace ckptdb::engine
