#pragma once

// The end of a save: each rank's report of what it wrote, and rank 0's commit
// of the record built from every report, with the retention policy applied
// after it.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/options.h"
#include "ckptdb/status.h"
#include "engine/collectives/classes.h"
#include "engine/save/save_record.h"
#include "planner/incremental.h"
#include "planner/retention.h"
#include "planner/save_plan.h"
#include "storage/store.h"

namespace ckptdb::engine {

// A rank's report: its write status, staged files and chunks (in plan order
// of its chunks), encoded for rank 0.
std::string EncodeWritten(const Status& status,
                          const std::vector<std::string>& files,
                          const std::vector<WrittenChunk>& chunks);

// Decodes EncodeWritten's bytes; Internal when they are malformed.
Status DecodeWritten(std::string_view bytes, Status* status,
                     std::vector<std::string>* files,
                     std::vector<WrittenChunk>* chunks);

// Rank 0, after checkpoint `id` committed: deletes what `policy` no longer
// keeps, oldest first; `*deleted_any` says whether it deleted or tried to (a
// failed delete may have taken effect). A failure names the committed
// checkpoint.
Status ApplyRetention(storage::Store& store,
                      const planner::RetentionPolicy& policy, int64_t id,
                      bool* deleted_any);

// Rank 0: every rank's written files and checksums (`results`) become the
// record of the whole plan (every chunk of `classes`), its references checked
// against checkpoint `base_id` (which they were decided on), committed; the
// outcome, encoded for the other ranks.
// `committed` holds the chunks of rank 0's last commit; on success, those of
// this one, for the next incremental save to compare with; then `retention`
// is applied.
std::string CommitOnRoot(storage::Store& store,
                         const planner::SaveClasses& classes,
                         size_t max_chunk_bytes, int64_t id, int64_t base_id,
                         const SaveOptions& options, int world,
                         const std::vector<std::string>& results,
                         std::optional<planner::PreviousCheckpoint>* committed,
                         const planner::RetentionPolicy& retention);

}  // namespace ckptdb::engine
