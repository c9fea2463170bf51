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
      Status deleted = store.Delete(doomed);
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

std::string CommitOnRoot(storage::Store& store,
                         const planner::SaveClasses& classes,
                         size_t max_chunk_bytes, int64_t id, int64_t base_id,
                         const SaveOptions& options, int world,
                         const std::vector<std::string>& results,
                         std::optional<planner::PreviousCheckpoint>* committed,
                         const planner::RetentionPolicy& retention) {
  std::vector<Status> write_statuses(world);
  std::vector<std::vector<std::string>> all_files(world);
  std::vector<std::vector<WrittenChunk>> all_sums(world);
  Status s;
  for (int r = 0; r < world && s.ok(); ++r) {
    s = DecodeWritten(results[r], &write_statuses[r], &all_files[r],
                      &all_sums[r]);
  }
  if (s.ok()) s = FirstError(write_statuses);
  CheckpointMetadata meta;
  if (s.ok()) {
    Result<planner::SavePlan> plan =
        planner::BuildClassSavePlan(classes, max_chunk_bytes);
    s = plan.status();
    if (s.ok()) {
      auto built =
          CommitRecord(std::move(plan).value(), id, options, world, all_sums);
      s = built.status();
      if (built.ok()) meta = std::move(built).value();
    }
  }
  if (s.ok()) s = CheckRecordReferences(store, meta, base_id, *committed);
  std::vector<std::string> staged;
  for (auto& f : all_files) staged.insert(staged.end(), f.begin(), f.end());
  if (s.ok()) s = store.Commit(meta, staged);
  if (!s.ok()) store.RemoveStaged(staged);
  committed->reset();
  if (s.ok()) committed->emplace(id, std::move(meta.tensors));
  bool deleted = false;
  if (s.ok()) s = ApplyRetention(store, retention, id, &deleted);
  return EncodeSaveOutcome({s, meta.info, deleted});
}

}  // namespace ckptdb::engine
