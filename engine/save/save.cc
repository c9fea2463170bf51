// DB::Save: layouts gathered once per class of identical ranks, each rank
// planning only the chunks it writes (rank 0 of a blocking save: every rank's,
// for its record), chunks staged per writer rank, ingested and committed by
// rank 0.
#include "engine/api/db_impl.h"
#include "engine/collectives/agreement.h"
#include "engine/collectives/classes.h"
#include "engine/collectives/wire.h"
#include "engine/save/prepared_save.h"
#include "engine/save/save_commit.h"
#include "engine/save/save_incremental.h"
#include "engine/save/save_layout.h"
#include "engine/save/staged_writes.h"
#include "planner/save_plan.h"

namespace ckptdb::engine {

Result<int64_t> DBImpl::IncrementalBase() {
  if (!options_.incremental) return 0;
  CKPTDB_ASSIGN_OR_RETURN(auto all, store_->List());
  if (all.empty() || store_->read_only())
    return all.empty() ? 0 : all.back().id;
  // Bytes of the latest checkpoint that are lost (a value file missing or cut
  // short) cannot be shared: the save writes every chunk again from the
  // caller's tensors. The store's LOG and `verify` name the lost file.
  const Status shareable = store_->CheckShareable(all.back().id);
  if (shareable.IsCorruption()) return 0;
  CKPTDB_RETURN_IF_ERROR(shareable);
  return all.back().id;
}

Result<PreparedSave> DBImpl::PrepareSave(const StateDict& state,
                                         const SaveOptions& options,
                                         bool whole_plan_on_root) {
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  const int rank = comm_->rank();
  PreparedSave p;
  p.options = options;
  // Alone, this rank's part is the whole plan.
  p.whole_plan = rank == 0 && (whole_plan_on_root || comm_->size() == 1);

  // 1-2. Local layout with the local status, gathered once per class of
  // ranks with identical layouts, once the ranks agree on step, tag and user
  // metadata; 3. this rank's part of the same validated plan on every rank.
  planner::RankSaveLayout layout;
  Status local = BuildLayout(state, devices_.copier, &layout, &p.views);
  CKPTDB_ASSIGN_OR_RETURN(
      p.classes,
      GatherSaveClasses(*comm_, SaveArguments(options), &layout, local));
  CKPTDB_ASSIGN_OR_RETURN(
      p.plan, planner::BuildClassSavePlan(p.classes, options_.max_chunk_bytes,
                                          p.whole_plan ? -1 : rank));

  // Rank 0 checks that it may commit and picks the id, before any byte is
  // written, and the checkpoint an incremental save compares with.
  CKPTDB_ASSIGN_OR_RETURN(
      p.id, IdFromRoot(*comm_, [&]() -> Result<int64_t> {
        if (options.tag) {
          CKPTDB_RETURN_IF_ERROR(store_->CheckTagFree(*options.tag));
        }
        CKPTDB_ASSIGN_OR_RETURN(p.base_id, IncrementalBase());
        return store_->NextCheckpointId();
      }));
  CKPTDB_ASSIGN_OR_RETURN(
      p.base_id,
      IdFromRoot(*comm_, [&]() -> Result<int64_t> { return p.base_id; }));
  p.mine = CollectMyChunks(p.plan, p.own_layout(rank), p.views, rank, &p.order);
  return p;
}

Status DBImpl::WriteMyChunks(const PreparedSave& p, SnapshotRing* snapshot,
                             std::vector<WrittenChunk>* checksums,
                             std::vector<std::string>* files) {
  const int rank = comm_->rank();
  // Every rank keeps the chunks of its last commit (rank 0 the whole record,
  // the others their own): no read (and, on the others, no re-open of their
  // handle) when that is the checkpoint compared with.
  planner::PreviousCheckpoint read;
  const planner::PreviousCheckpoint* previous =
      ComparedWith(last_commit_, *store_, p.base_id, p.plan, p.mine, rank,
                   comm_->size(), &read);
  const WriteContext context{p.id,
                             rank,
                             comm_->size(),
                             io_threads(),
                             p.base_id != 0 || options_.incremental,
                             previous,
                             snapshot,
                             devices_.copier};
  return WriteStaged(*store_, p.plan, p.mine, p.order, context, checksums,
                     files);
}

Result<SaveOutcome> DBImpl::CommitOnEveryRank(
    PreparedSave& p, const Status& written,
    const std::vector<std::string>& files,
    const std::vector<WrittenChunk>& checksums) {
  CKPTDB_ASSIGN_OR_RETURN(
      auto results,
      GatherToRoot(*comm_, EncodeWritten(written, files, checksums)));
  std::string outcome;
  if (comm_->rank() == 0) {
    outcome = CommitOnRoot(
        *store_,
        {p.classes, options_.max_chunk_bytes, p.whole_plan ? &p.plan : nullptr,
         p.id, p.base_id, p.options, comm_->size()},
        results, &last_commit_,
        {options_.keep_last, options_.keep_every_steps});
    if (!options_.incremental) last_commit_.reset();
  }
  CKPTDB_RETURN_IF_ERROR(comm_->Broadcast(&outcome, 0));
  SaveOutcome decoded;
  CKPTDB_RETURN_IF_ERROR(DecodeSaveOutcome(outcome, &decoded));
  return decoded;
}

Result<CheckpointInfo> DBImpl::FinishSave(PreparedSave& p,
                                          SnapshotRing* snapshot) {
  // 4. Stream this rank's chunks into staged files, in key order, split into
  // parts of contiguous key ranges written in parallel; unchanged chunks are
  // referred to, not written.
  std::vector<WrittenChunk> checksums;
  std::vector<std::string> files;
  const Status written = WriteMyChunks(p, snapshot, &checksums, &files);
  // 5. Rank 0 ingests every rank's files and writes the record; all ranks
  // return its outcome.
  CKPTDB_ASSIGN_OR_RETURN(const SaveOutcome outcome,
                          CommitOnEveryRank(p, written, files, checksums));
  // What the next incremental save compares with (rank 0's whole record is
  // kept by CommitOnRoot).
  if (comm_->rank() != 0) {
    last_commit_.reset();
    if (outcome.status.ok() && written.ok() && options_.incremental)
      last_commit_ = OwnChunks(outcome.info.id, p.plan, p.mine, checksums);
  }
  // The retention policy may have deleted checkpoints, even when a later
  // deletion failed.
  if (outcome.deleted) LetGoOfDeletedFiles();
  CKPTDB_RETURN_IF_ERROR(outcome.status);
  return outcome.info;
}

Result<CheckpointInfo> DBImpl::Save(const StateDict& state,
                                    const SaveOptions& options) {
  std::lock_guard one_at_a_time(collective_mu_);
  WaitPending();
  return NotingPeerClosing(SaveNow(state, options));
}

Result<CheckpointInfo> DBImpl::SaveNow(const StateDict& state,
                                       const SaveOptions& options) {
  CKPTDB_ASSIGN_OR_RETURN(PreparedSave p, PrepareSave(state, options, true));
  return FinishSave(p, nullptr);
}

}  // namespace ckptdb::engine
