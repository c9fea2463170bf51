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
#include "engine/save/save_incremental.h"
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

// What rank 0 commits: the save plan's inputs (every chunk of `classes`, cut
// at `max_chunk_bytes`), checkpoint `id`, whose references were decided
// against checkpoints `base_ids`, saved by `world` ranks with `options`; rank
// 0 keeps the records of the last `depth` commits.
struct RootCommit {
  const planner::SaveClasses& classes;
  size_t max_chunk_bytes = 0;
  // The whole plan of `classes`, when rank 0 made it already (it is moved
  // into the record); null: planned here.
  planner::SavePlan* whole_plan = nullptr;
  int64_t id = 0;
  const std::vector<int64_t>& base_ids;
  const SaveOptions& options;
  int world = 0;
  int depth = 1;
};

// Every rank's report (EncodeWritten), decoded in rank order until the first
// one that is malformed: the staged files and chunks of those decoded, and
// the first error among their write statuses, or the decoding error.
struct RankReports {
  Status status;
  std::vector<std::string> staged;
  std::vector<std::vector<WrittenChunk>> chunks;
};
RankReports DecodeReports(const std::vector<std::string>& results, int world);

// Rank 0: every rank's written files and checksums (`results`) become the
// record of the whole plan, its references checked against
// `commit.base_ids`, committed; the outcome, encoded for the other ranks.
// `committed` holds the records of rank 0's last commits; on success this one
// joins them, for the next incremental saves to compare with (on failure they
// are dropped); then `retention` is applied.
std::string CommitOnRoot(storage::Store& store, const RootCommit& commit,
                         const std::vector<std::string>& results,
                         KeptCommits* committed,
                         const planner::RetentionPolicy& retention);

}  // namespace ckptdb::engine
