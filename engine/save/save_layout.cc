#include "engine/save/save_layout.h"

#include <algorithm>

#include "core/text.h"
#include "engine/api/tensor_checks.h"
#include "engine/copy/box_views.h"
#include "planner/flatten.h"
#include "storage/store.h"

namespace ckptdb::engine {

// Local part of a save: this rank's layout and the views behind its shards
// (a flat range gives one view per box of its decomposition).
Status BuildLayout(const StateDict& state, DeviceCopier* copier,
                   planner::RankSaveLayout* layout,
                   std::vector<TensorView>* views) {
  CKPTDB_ASSIGN_OR_RETURN(auto leaves, planner::Flatten(state));
  layout->shards.reserve(leaves.size());
  views->reserve(leaves.size());
  for (auto& leaf : leaves) {
    // A key that is not UTF-8 has a part that is not.
    CKPTDB_RETURN_IF_ERROR(CheckUtf8("key", leaf.flat_key));
    // Kinds travel only when some part is not a str key.
    if (planner::AllStrKeys(leaf.kinds)) leaf.kinds.clear();
    if (leaf.value) {
      if (const auto* text = std::get_if<std::string>(leaf.value)) {
        CKPTDB_RETURN_IF_ERROR(
            CheckUtf8("the str value of key '" + leaf.flat_key + "'", *text));
      }
      if (const auto* big = std::get_if<BigInt>(leaf.value);
          big != nullptr && !IsValidBigInt(*big)) {
        return Status::InvalidArgument(
            "the int value of key '" + leaf.flat_key + "' is written as '" +
            PrintableText(big->digits.substr(0, 64)) +
            "': a BigInt holds the decimal digits of an integer outside 64 "
            "bits, with no leading zeros (an int64_t holds the others)");
      }
      layout->values.push_back({std::move(leaf.flat_key), std::move(leaf.path),
                                *leaf.value, std::move(leaf.kinds)});
      continue;
    }
    CKPTDB_RETURN_IF_ERROR(CheckView(leaf.flat_key, *leaf.tensor, copier));
    if (!leaf.tensor->is_flat_range()) {  // one box: the leaf's parts move in
      const TensorView& v = *leaf.tensor;
      layout->shards.push_back({std::move(leaf.flat_key), std::move(leaf.path),
                                v.dtype, v.global_shape, v.box(),
                                std::move(leaf.kinds)});
      views->push_back(v);
      continue;
    }
    for (TensorView& v : BoxViews(*leaf.tensor)) {
      layout->shards.push_back({leaf.flat_key, leaf.path, v.dtype,
                                v.global_shape, v.box(), leaf.kinds});
      views->push_back(std::move(v));
    }
  }
  return Status::OK();
}

namespace {

// Address of `chunk` inside the writer's dense shard buffer. The planner cuts
// chunks along outer dimensions only, so the chunk is one contiguous run of
// the shard.
const void* ChunkData(const planner::PlannedChunk& chunk,
                      const planner::SaveShard& shard, const TensorView& view) {
  int64_t linear = 0;
  for (size_t d = 0; d < shard.box.ndim(); ++d) {
    linear = linear * shard.box.shape[d] +
             (chunk.box.origin[d] - shard.box.origin[d]);
  }
  return static_cast<const char*>(view.data) +
         static_cast<size_t>(linear) * DTypeSize(view.dtype);
}

// The chunk `c` of `tensor` this rank writes from `view`, its shard.
MyChunk MakeMyChunk(const planner::PlannedTensor& tensor, size_t t, size_t c,
                    const planner::SaveShard& shard, const TensorView& view) {
  const planner::PlannedChunk& chunk = tensor.chunks[c];
  MyChunk m{t, c, view.data, chunk.nbytes,
            view.device.type == DeviceType::kCPU ? nullptr : &view.device};
  if (view.is_dense()) {
    m.data = ChunkData(chunk, shard, view);
    return m;
  }
  m.strided = &view;
  m.in_view.shape = chunk.box.shape;
  for (size_t d = 0; d < chunk.box.ndim(); ++d)
    m.in_view.origin.push_back(chunk.box.origin[d] - shard.box.origin[d]);
  return m;
}

}  // namespace

// This rank's chunks of `plan`, and their order by storage key.
std::vector<MyChunk> CollectMyChunks(const planner::SavePlan& plan,
                                     const planner::RankSaveLayout& layout,
                                     const std::vector<TensorView>& views,
                                     int rank, std::vector<size_t>* order) {
  size_t count = 0;
  for (const auto& tensor : plan.tensors) {
    for (const auto& chunk : tensor.chunks) count += chunk.writer_rank == rank;
  }
  std::vector<MyChunk> mine;
  mine.reserve(count);
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const auto& tensor = plan.tensors[t];
    for (size_t c = 0; c < tensor.chunks.size(); ++c) {
      const auto& chunk = tensor.chunks[c];
      if (chunk.writer_rank != rank) continue;
      mine.push_back(MakeMyChunk(tensor, t, c,
                                 layout.shards[chunk.source_shard],
                                 views[chunk.source_shard]));
    }
  }
  std::vector<storage::ChunkToWrite> names(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    const auto& tensor = plan.tensors[mine[i].tensor];
    names[i] = {tensor.flat_key, &tensor.chunks[mine[i].chunk].box.origin};
  }
  *order = storage::ChunkWriteOrder(names);
  return mine;
}

}  // namespace ckptdb::engine
