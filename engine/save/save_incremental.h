#pragma once

// What an incremental save compares its chunks with (the decisions themselves
// are planner/incremental.h's): the chunks of the checkpoints it is based on,
// read from the store or kept from this handle's last commits, and rank 0's
// check of the record's references before the commit.
#include <cstdint>
#include <deque>
#include <string_view>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "engine/save/save_layout.h"
#include "engine/save/save_record.h"
#include "planner/incremental.h"
#include "planner/save_plan.h"
#include "storage/store.h"

namespace ckptdb::engine {

// The chunks of a handle's last commits, newest first: rank 0's whole
// records, the other ranks' own chunks (OwnChunks).
using KeptCommits = std::deque<planner::PreviousCheckpoint>;

// After checkpoint `committed` of a save compared with up to `depth`
// checkpoints: it goes first in `kept`, which keeps the newest `depth`.
void KeepCommit(planner::PreviousCheckpoint committed, int depth,
                KeptCommits* kept);

// Drops from `kept` the commits that are not among `base_ids` (deleted
// since, or beyond the depth).
void ForgetUncompared(const std::vector<int64_t>& base_ids, KeptCommits* kept);

// The tensors whose chunks `rank` writes in `plan`, in key order.
std::vector<std::string_view> KeysWrittenBy(const planner::SavePlan& plan,
                                            int rank);

// The chunks of checkpoint `base_id`, one an incremental save compares with,
// for tensors `keys` (those this rank writes): none (id 0) when they cannot
// be read (those chunks are then compared with the other checkpoints, or
// written).
planner::PreviousCheckpoint ReadPrevious(
    storage::Store& store, int64_t base_id,
    const std::vector<std::string_view>& keys);

// The chunks this rank saved in checkpoint `id` (`written`, for `mine` of
// `plan`), as the record has them: what its next incremental save compares
// with while `id` is among the checkpoints it compares with, without reading
// the store.
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

// Rank 0, before committing `meta`: checks its references against the
// records of checkpoints `base_ids` they were decided on
// (planner::CheckReferences): those `kept` whole (rank 0's last commits),
// else the tensors with references, read from the store.
Status CheckRecordReferences(storage::Store& store,
                             const CheckpointMetadata& meta,
                             const std::vector<int64_t>& base_ids,
                             const KeptCommits& kept);

// What this rank's chunks are compared with in a save based on checkpoints
// `base_ids` (newest first), one record for each: what the handle kept of
// that commit (`kept`: the whole record on rank 0, its own chunks on the
// others) when it has it and, off rank 0, it covers this rank's chunks; else
// what ReadPrevious reads, held in `*read`.
planner::ComparedCheckpoints ComparedWith(
    const KeptCommits& kept, storage::Store& store,
    const std::vector<int64_t>& base_ids, const planner::SavePlan& plan,
    const std::vector<MyChunk>& mine, int rank, int world, KeptCommits* read);

}  // namespace ckptdb::engine
