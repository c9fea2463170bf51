#pragma once

// The metadata record of a save, as rank 0 builds it before the commit
// (DB::Save, CommitOnRoot in save_commit.cc). Internal; a header of its own so
// that the planning simulator (bench/plan_sim.cc) runs this code rather than a
// copy.

#include <cstdint>
#include <optional>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/options.h"
#include "ckptdb/status.h"
#include "planner/save_plan.h"

namespace ckptdb::engine {

// What a writer rank reports for one of its chunks.
struct WrittenChunk {
  uint64_t checksum = 0;
  // Absent when the rank saves without incremental saves.
  std::optional<ContentHash> content_hash{};
  // Non-zero: the chunk was not written but refers to the bytes of this
  // earlier checkpoint, written there by `writer_rank`.
  int64_t holder_id = 0;
  int32_t writer_rank = 0;
};

// How the record holds `chunk` of the plan, given what its writer reported:
// for a chunk referring to stored bytes, the rank that wrote them there.
ChunkMetadata RecordedChunk(planner::PlannedChunk chunk, const WrittenChunk& w);

// The record rank 0 commits: the plan's tensors with what each writer
// reported (`written_by_rank[rank]`, in plan order of its chunks), the bytes
// written and the checkpoints referred to. Internal when a rank reported
// fewer chunks than it has. Takes the chunks' boxes from `plan`, tensor by
// tensor, so that the whole plan and the whole record are not held at once.
Result<CheckpointMetadata> CommitRecord(
    planner::SavePlan plan, int64_t id, const SaveOptions& options, int world,
    const std::vector<std::vector<WrittenChunk>>& written_by_rank);

}  // namespace ckptdb::engine
