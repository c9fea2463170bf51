#include "engine/save/save_incremental.h"

#include <algorithm>

namespace ckptdb::engine {

// The chunks of the checkpoint an incremental save compares with, for the
// tensors this rank writes: none when `base_id` is 0 (the first save, or
// incremental saves off) or when they cannot be read (every chunk is then
// written).
planner::PreviousCheckpoint ReadPrevious(storage::Store& store, int64_t base_id,
                                         const planner::SavePlan& plan,
                                         int rank) {
  planner::PreviousCheckpoint previous;
  if (base_id == 0 || !store.Refresh().ok()) return previous;
  std::vector<std::string_view> keys;  // the plan's
  for (const auto& tensor : plan.tensors) {
    for (const auto& chunk : tensor.chunks) {
      if (chunk.writer_rank != rank) continue;
      keys.push_back(tensor.flat_key);
      break;
    }
  }
  if (keys.empty()) return previous;
  auto meta = store.GetMetadata(base_id, keys);
  if (!meta.ok()) return previous;
  previous.id = base_id;
  previous.tensors = std::move(meta->tensors);
  return previous;
}

// The chunks this rank saved in checkpoint `id` (`written`, for `mine` of
// `plan`), as the record has them: what its next incremental save compares
// with when `id` is still the latest checkpoint, without reading the store.
planner::PreviousCheckpoint OwnChunks(
    int64_t id, const planner::SavePlan& plan, const std::vector<MyChunk>& mine,
    const std::vector<WrittenChunk>& written) {
  CKPTDB_ASSERT(mine.size() == written.size());
  planner::PreviousCheckpoint own;
  own.id = id;
  for (size_t k = 0; k < mine.size(); ++k) {
    const planner::PlannedTensor& tensor = plan.tensors[mine[k].tensor];
    TensorMetadata& t = own.tensors[tensor.flat_key];
    t.dtype = tensor.dtype;
    t.global_shape = tensor.global_shape;
    t.chunks.push_back(RecordedChunk(tensor.chunks[mine[k].chunk], written[k]));
  }
  for (auto& [key, t] : own.tensors) {
    std::sort(t.chunks.begin(), t.chunks.end(),
              [](const ChunkMetadata& a, const ChunkMetadata& b) {
                return a.box.origin < b.box.origin;
              });
  }
  return own;
}

// Whether `previous` has a chunk to compare with for every chunk of `mine`:
// a rank's own chunks of the last save are enough when it saves the same
// chunks again; otherwise it reads the tensors it writes from the store
// (ReadPrevious), whichever rank wrote their chunks.
bool CoversMyChunks(const planner::PreviousCheckpoint& previous,
                    const planner::SavePlan& plan,
                    const std::vector<MyChunk>& mine, int world) {
  auto near = previous.tensors.cbegin();  // mine come in tensor order
  for (const MyChunk& m : mine) {
    const planner::PlannedTensor& tensor = plan.tensors[m.tensor];
    if (planner::CandidateChunk(previous, tensor.flat_key, tensor.dtype,
                                tensor.global_shape, tensor.chunks[m.chunk].box,
                                world, &near) == nullptr)
      return false;
  }
  return true;
}

// Rank 0, before committing `meta`: checks its references against the record
// of checkpoint `base_id` they were decided on (planner::CheckReferences):
// `held` where it is that record, whole (rank 0's last commit), else the
// tensors with references, read from the store.
Status CheckRecordReferences(
    storage::Store& store, const CheckpointMetadata& meta, int64_t base_id,
    const std::optional<planner::PreviousCheckpoint>& held) {
  if (meta.info.references.empty()) return Status::OK();
  if (held && held->id == base_id && base_id != 0)
    return planner::CheckReferences(meta.tensors, *held, meta.info.world_size);
  planner::PreviousCheckpoint base;
  if (base_id != 0) {
    std::vector<std::string_view> keys;  // meta's
    for (const auto& [key, tensor] : meta.tensors) {
      if (std::any_of(tensor.chunks.begin(), tensor.chunks.end(),
                      [](const ChunkMetadata& c) { return c.holder_id != 0; }))
        keys.push_back(key);
    }
    CKPTDB_ASSIGN_OR_RETURN(CheckpointMetadata read,
                            store.GetMetadata(base_id, keys));
    base.id = base_id;
    base.tensors = std::move(read.tensors);
  }
  return planner::CheckReferences(meta.tensors, base, meta.info.world_size);
}

const planner::PreviousCheckpoint* ComparedWith(
    const std::optional<planner::PreviousCheckpoint>& last_commit,
    storage::Store& store, int64_t base_id, const planner::SavePlan& plan,
    const std::vector<MyChunk>& mine, int rank, int world,
    planner::PreviousCheckpoint* read) {
  if (last_commit && last_commit->id == base_id && base_id != 0 &&
      (rank == 0 || CoversMyChunks(*last_commit, plan, mine, world))) {
    return &*last_commit;
  }
  *read = ReadPrevious(store, base_id, plan, rank);
  return read;
}

}  // namespace ckptdb::engine
