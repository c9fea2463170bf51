#pragma once

#include <cstdint>
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
  // Bytes a rank holds for slices in flight (read for other ranks, or staged
  // before landing in a target) in one round of the load; the same on every
  // rank. A chunk larger than this gets a round of its own.
  uint64_t round_bytes;
};

// Carries out this rank's part of `plan`, collectively: reads the chunks it is
// the reader of (in parallel, checksums verified), copies their slices straight
// into local targets (converting dtypes where they differ), and sends the
// slices other ranks need. Reads are grouped into rounds so that what a rank
// holds for sending or receiving stays within `round_bytes` (plus one chunk per
// I/O thread); large slices travel as messages of their own and land directly
// in the target when it holds them as one run of the same dtype, small slices
// for one peer are packed into one message per round. Every rank returns the
// same status; on error, targets may be partly filled.
Status ExecuteLoad(const LoadExecution& execution, LoadStats* stats);

// The rounds of `plan` (each a list of read indices, in plan order): every read
// in the first round where its reader's bytes held for other ranks and each
// receiving rank's incoming bytes stay within `round_bytes`. Deterministic, so
// every rank computes the same rounds. Exposed for tests.
std::vector<std::vector<size_t>> AssignRounds(const CheckpointMetadata& meta,
                                              const planner::LoadPlan& plan,
                                              int world, uint64_t round_bytes);

}  // namespace ckptdb::engine
