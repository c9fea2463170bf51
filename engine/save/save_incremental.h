#pragma once

// What an incremental save compares its chunks with (the decisions themselves
// are planner/incremental.h's): the chunks of the checkpoint it is based on,
// read from the store or kept from this handle's last commit, and rank 0's
// check of the record's references before the commit.
#include <cstdint>
#include <optional>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "engine/save/save_layout.h"
#include "engine/save/save_record.h"
#include "planner/incremental.h"
#include "planner/save_plan.h"
#include "storage/store.h"

namespace ckptdb::engine {

// The chunks of the checkpoint an incremental save compares with, for the
// tensors this rank writes: none when `base_id` is 0 (the first save, or
// incremental saves off) or when they cannot be read (every chunk is then
// written).
planner::PreviousCheckpoint ReadPrevious(storage::Store& store, int64_t base_id,
                                         const planner::SavePlan& plan,
                                         int rank);

// The chunks this rank saved in checkpoint `id` (`written`, for `mine` of
// `plan`), as the record has them: what its next incremental save compares
// with when `id` is still the latest checkpoint, without reading the store.
planner::PreviousCheckpoint OwnChunks(int64_t id, const planner::SavePlan& plan,
                                      const std::vector<MyChunk>& mine,
                                      const std::vector<WrittenChunk>& written);

// Whether `previous` has a chunk to compare with for every chunk of `mine`:
// a rank's own chunks of the last save are enough when it saves the same
// chunks again; otherwise it reads the tensors it writes from the store
// (ReadPrevious), whichever rank wrote their chunks.
bool CoversMyChunks(const planner::PreviousCheckpoint& previous,
                    const planner::SavePlan& plan,
                    const std::vector<MyChunk>& mine, int world);

// Rank 0, before committing `meta`: checks its references against the record
// of checkpoint `base_id` they were decided on (planner::CheckReferences):
// `held` where it is that record, whole (rank 0's last commit), else the
// tensors with references, read from the store.
Status CheckRecordReferences(
    storage::Store& store, const CheckpointMetadata& meta, int64_t base_id,
    const std::optional<planner::PreviousCheckpoint>& held);

// What this rank's chunks are compared with in a save based on checkpoint
// `base_id`: `last_commit` (what the handle kept of its last commit: the whole
// record on rank 0, its own chunks on the others) when it is that checkpoint
// and, off rank 0, covers this rank's chunks; else what ReadPrevious reads,
// held in `*read`.
const planner::PreviousCheckpoint* ComparedWith(
    const std::optional<planner::PreviousCheckpoint>& last_commit,
    storage::Store& store, int64_t base_id, const planner::SavePlan& plan,
    const std::vector<MyChunk>& mine, int rank, int world,
    planner::PreviousCheckpoint* read);

}  // namespace ckptdb::engine
