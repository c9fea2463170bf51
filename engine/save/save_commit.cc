#include "engine/save/save_commit.h"

#include "engine/collectives/wire.h"
#include "engine/save/save_incremental.h"

namespace ckptdb::engine {

std::string EncodeWritten(const Status& status,
                          const std::vector<std::string>& files,
                          const std::vector<WrittenChunk>& chunks) {
  WireWriter w;
  w.Status(status);
  w.Strings(files);
  w.U64(chunks.size());
  for (const WrittenChunk& c : chunks) {
    w.U64(c.checksum);
    w.U64(c.content_hash ? 1 : 0);
    w.U64(c.content_hash ? c.content_hash->low : 0);
    w.U64(c.content_hash ? c.content_hash->high : 0);
    w.I64(c.holder_id);
    w.I64(c.writer_rank);
  }
  return w.Take();
}

Status DecodeWritten(std::string_view bytes, Status* status,
                     std::vector<std::string>* files,
                     std::vector<WrittenChunk>* chunks) {
  WireReader r(bytes);
  uint64_t n;
  const Status malformed =
      Status::Internal("malformed save result from a rank");
  if (!r.Status(status) || !r.Strings(files) || !r.U64(&n) ||
      n > bytes.size() / 48) {
    return malformed;
  }
  chunks->resize(n);
  for (auto& c : *chunks) {
    uint64_t hashed = 0;
    ContentHash hash;
    int64_t writer = 0;
    if (!r.U64(&c.checksum) || !r.U64(&hashed) || !r.U64(&hash.low) ||
        !r.U64(&hash.high) || !r.I64(&c.holder_id) || !r.I64(&writer))
      return malformed;
    if (hashed != 0) c.content_hash = hash;
    c.writer_rank = static_cast<int32_t>(writer);
  }
  return Status::OK();
}

// Rank 0, after checkpoint `id` committed: deletes what `policy` no longer
// keeps, oldest first; `*deleted_any` says whether it deleted or tried to (a
// failed delete may have taken effect). A failure names the committed
// checkpoint.
Status ApplyRetention(storage::Store& store,
                      const planner::RetentionPolicy& policy, int64_t id,
                      bool* deleted_any) {
  if (!policy.keep_last) return Status::OK();
  Status s = [&]() -> Status {
    CKPTDB_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> all, store.List());
    for (int64_t doomed : planner::CheckpointsToDelete(all, policy)) {
      *deleted_any = true;
      // The value files go on the store's thread: the save returns once
      // the checkpoint is gone, and the next one waits for their space
      // before it writes.
      Status deleted =
          store.Delete(doomed, storage::FileRemoval::kInBackground);
      if (!deleted.ok()) {
        return Status(deleted.code(), "deleting checkpoint id " +
                                          std::to_string(doomed) + ": " +
                                          deleted.message());
      }
    }
    return Status::OK();
  }();
  if (s.ok()) return s;
  return Status(s.code(), "checkpoint id " + std::to_string(id) +
                              " is committed, but applying the retention "
                              "policy (keep_last, keep_every_steps) failed: " +
                              s.message());
}

RankReports DecodeReports(const std::vector<std::string>& results, int world) {
  RankReports reports;
  reports.chunks.resize(world);
  std::vector<Status> write_statuses(world);
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> files;
    reports.status = DecodeWritten(results[r], &write_statuses[r], &files,
                                   &reports.chunks[r]);
    reports.staged.insert(reports.staged.end(), files.begin(), files.end());
    if (!reports.status.ok()) return reports;
  }
  reports.status = FirstError(write_statuses);
  return reports;
}

namespace {

// The record of checkpoint `commit.id`: the whole plan, with the checksums
// and references every rank reported (`chunks`, by rank).
Result<CheckpointMetadata> BuildRecord(
    const RootCommit& commit,
    const std::vector<std::vector<WrittenChunk>>& chunks) {
  if (commit.whole_plan != nullptr) {
    return CommitRecord(std::move(*commit.whole_plan), commit.id,
                        commit.options, commit.world, chunks);
  }
  CKPTDB_ASSIGN_OR_RETURN(
      planner::SavePlan plan,
      planner::BuildClassSavePlan(commit.classes, commit.max_chunk_bytes));
  return CommitRecord(std::move(plan), commit.id, commit.options, commit.world,
                      chunks);
}

}  // namespace

std::string CommitOnRoot(storage::Store& store, const RootCommit& commit,
                         const std::vector<std::string>& results,
                         KeptCommits* committed,
                         const planner::RetentionPolicy& retention) {
  RankReports reports = DecodeReports(results, commit.world);
  Status s = reports.status;
  CheckpointMetadata meta;
  if (s.ok()) {
    Result<CheckpointMetadata> built = BuildRecord(commit, reports.chunks);
    s = built.status();
    if (built.ok()) meta = std::move(built).value();
  }
  if (s.ok())
    s = CheckRecordReferences(store, meta, commit.base_ids, *committed);
  if (s.ok()) s = store.Commit(meta, reports.staged);
  if (!s.ok()) store.RemoveStaged(reports.staged);
  if (s.ok()) {
    KeepCommit({commit.id, std::move(meta.tensors)}, commit.depth, committed);
  } else {
    committed->clear();
  }
  bool deleted = false;
  if (s.ok()) s = ApplyRetention(store, retention, commit.id, &deleted);
  return EncodeSaveOutcome({s, meta.info, deleted});
}

}  // namespace ckptdb::engine
