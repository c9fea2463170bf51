#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/db.h"
#include "engine/collectives/wire.h"
#include "engine/device/device.h"
#include "engine/device/device_transport.h"
#include "planner/exchange_plan.h"
#include "planner/load_plan.h"
#include "storage/store.h"

namespace ckptdb::engine {

// Host memory for the messages of the two rounds a load has in flight: one
// slot per parity of round, reserved for the largest round of its parity
// before the load's readers start, and kept with its pages. A handle
// keeps one between its loads: laid out afresh by each load, the memory went
// back to the system in between in some processes and was faulted in again
// (2,372 page faults a 2-rank resharded load over gloo, 85 with it kept).
class LoadScratch {
 public:
  // Room for `n` bytes in slot `slot` (0 or 1); earlier bytes are not kept.
  // An allocation that fails is IOError naming the bytes and leaves the slot
  // empty and usable.
  Result<char*> Reserve(int slot, uint64_t n);

 private:
  std::unique_ptr<char[]> data_[2];
  uint64_t size_[2] = {0, 0};
};

// What one rank needs to carry out its part of a load plan.
struct LoadExecution {
  const CheckpointMetadata& meta;
  // The global plan or this rank's per-rank plan (planner::RestrictToRank).
  const planner::LoadPlan& plan;
  // This rank's targets, indexed like the LoadTargets it contributed to the
  // plan.
  const std::vector<TensorView*>& targets;
  storage::Store& store;
  Communicator& comm;
  int io_threads;
  // Bytes of the checkpoint's canonical positions per round
  // (planner::ExchangeInputs::window_bytes); the same on every rank. What a
  // rank holds for slices in flight stays within it plus one chunk per round,
  // two rounds at a time.
  uint64_t round_bytes;
  // Any rank's target placements: the same answers on every rank.
  const planner::PlacementLookup& placements;
  // Fills this rank's device targets (set when it has any).
  DeviceCopier* copier;
  // Moves slices for device targets of other ranks device to device when set
  // (on every rank); they travel through host memory over `comm` otherwise.
  DeviceTransport* transport;
  // Where the rounds' messages are staged; the handle's, kept between loads.
  LoadScratch& scratch;
};

// Carries out this rank's part of `plan` along its planner::ExchangePlan:
// reads the chunks it is the reader of (checksums verified) on io_threads
// threads, copies their slices straight into local targets (converting dtypes
// where they differ) or into the messages for other ranks, and walks its
// rounds in order, exchanging each round's messages point to point while the
// next round's chunks are read. No collective runs per round: a rank that
// fails keeps walking (sending what it has) and every rank returns the same
// status, agreed once at the end; on error, targets may be partly filled.
//
// With a DeviceTransport, boxes for other ranks' device targets travel device
// to device as the plan routes them (a broadcast or a binomial tree of hops).
Status ExecuteLoad(const LoadExecution& execution, LoadStats* stats);

}  // namespace ckptdb::engine
