#pragma once

// This rank's part of a save: its layout (the shards and small values of its
// state dict) and the chunks of the plan it writes, in write order.
#include <cstdint>
#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "ckptdb/types.h"
#include "engine/device/device.h"
#include "planner/save_plan.h"

namespace ckptdb::engine {

// Local part of a save: this rank's layout and the views behind its shards
// (a flat range gives one view per box of its decomposition). Device views
// are checked through `copier` (CheckView).
Status BuildLayout(const StateDict& state, DeviceCopier* copier,
                   planner::RankSaveLayout* layout,
                   std::vector<TensorView>* views);

// One chunk this rank writes.
struct MyChunk {
  size_t tensor;
  size_t chunk;
  // Dense source: the chunk's bytes. Strided source: the view's data.
  const void* data;
  uint64_t nbytes;
  const Device* device;  // nullptr: host memory
  // A strided source view the chunk is packed from; nullptr when `data` holds
  // the chunk's bytes.
  const TensorView* strided = nullptr;
  // Strided source: the chunk's box in the view's local index space.
  Box in_view{};
};

// This rank's chunks of `plan`, and their order by storage key.
std::vector<MyChunk> CollectMyChunks(const planner::SavePlan& plan,
                                     const planner::RankSaveLayout& layout,
                                     const std::vector<TensorView>& views,
                                     int rank, std::vector<size_t>* order);

}  // namespace ckptdb::engine
