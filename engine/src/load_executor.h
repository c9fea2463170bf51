#pragma once

#include <cstdint>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/db.h"
#include "engine/src/device_transport.h"
#include "engine/src/wire.h"
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
  // Every rank's target placements, [rank][target]: the same on every rank.
  const std::vector<std::vector<TargetPlacement>>& placements;
  // Moves slices for device targets of other ranks device to device when set
  // (on every rank); they travel through host memory over `comm` otherwise.
  DeviceTransport* transport;
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
//
// With a DeviceTransport, a slice for another rank's device target is
// converted to the target's dtype by its reader, copied to the reader's device
// once, and sent device to device, received in place when the target holds it
// as one run. A box that several ranks need travels once per receiver: by
// broadcast when every other rank needs it, otherwise along a binomial tree in
// which each receiver forwards it to later ones (DeviceHops).
Status ExecuteLoad(const LoadExecution& execution, LoadStats* stats);

// The rounds of `plan` (each a list of read indices, in plan order): every read
// in the first round where its reader's bytes held for other ranks and each
// receiving rank's incoming bytes stay within `round_bytes`. Deterministic, so
// every rank computes the same rounds. Exposed for tests.
std::vector<std::vector<size_t>> AssignRounds(const CheckpointMetadata& meta,
                                              const planner::LoadPlan& plan,
                                              int world, uint64_t round_bytes);

// One transfer of a box for device targets: at `step`, `from` sends the box
// to `to`.
struct DeviceHop {
  int step, from, to;
  friend bool operator==(const DeviceHop&, const DeviceHop&) = default;
};

// The hops that bring a box from `reader` to every one of `receivers`
// (distinct, none the reader): a binomial tree, in which every rank holding the
// box after a step sends it to one rank still waiting in the next, so the
// reader sends it ceil(log2(n + 1)) times for n receivers. Exposed for tests.
std::vector<DeviceHop> DeviceHops(int reader,
                                  const std::vector<int>& receivers);

}  // namespace ckptdb::engine
