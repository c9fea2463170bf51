// DB::Save: layouts gathered once per class of identical ranks, each rank
// planning only the chunks it writes (rank 0 of a blocking save: every rank's,
// for its record), chunks staged per writer rank, ingested and committed by
// rank 0.
#include "core/text.h"
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

Result<std::vector<int64_t>> DBImpl::IncrementalBases() {
  if (!options_.incremental) return std::vector<int64_t>{};
  CKPTDB_ASSIGN_OR_RETURN(auto all, store_->List());
  std::vector<int64_t> ids;
  for (const CheckpointInfo& info : all) ids.push_back(info.id);
  std::vector<int64_t> bases =
      planner::ComparedIds(ids, options_.incremental_depth);
  if (store_->read_only()) return bases;
  // Bytes of a checkpoint that are lost (a value file missing or cut short)
  // cannot be shared: its chunks are not compared with, and those equal to
  // none of the others are written again from the caller's tensors. The
  // store's LOG and `verify` name the lost file.
  std::vector<int64_t> shareable;
  for (int64_t id : bases) {
    const Status s = store_->CheckShareable(id);
    if (s.IsCorruption()) continue;
    CKPTDB_RETURN_IF_ERROR(s);
    shareable.push_back(id);
  }
  return shareable;
}

namespace {

// The save options' text (the tag, user metadata) is UTF-8.
Status CheckRecordedText(const SaveOptions& options) {
  if (options.tag) CKPTDB_RETURN_IF_ERROR(CheckUtf8("tag", *options.tag));
  for (const auto& [key, value] : options.user_metadata) {
    CKPTDB_RETURN_IF_ERROR(CheckUtf8("user metadata key", key));
    CKPTDB_RETURN_IF_ERROR(
        CheckUtf8("the user metadata value of '" + key + "'", value));
  }
  return Status::OK();
}

}  // namespace

Result<PreparedSave> DBImpl::PrepareSave(const StateDict& state,
                                         const SaveOptions& options,
                                         bool whole_plan_on_root,
                                         std::string_view call, Status local) {
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
  const Status built = BuildLayout(state, devices_.copier, &layout, &p.views);
  if (local.ok()) local = built;
  if (local.ok()) local = CheckRecordedText(options);
  CKPTDB_ASSIGN_OR_RETURN(
      p.classes, GatherSaveClasses(*comm_, SaveArguments(options, call, local),
                                   &layout, local));
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
        CKPTDB_ASSIGN_OR_RETURN(p.base_ids, IncrementalBases());
        return store_->NextCheckpointId();
      }));
  CKPTDB_ASSIGN_OR_RETURN(
      p.base_ids, IdsFromRoot(*comm_, [&]() -> Result<std::vector<int64_t>> {
        return p.base_ids;
      }));
  p.mine = CollectMyChunks(p.plan, p.own_layout(rank), p.views, rank, &p.order);
  return p;
}

Status DBImpl::WriteMyChunks(const PreparedSave& p, SnapshotRing* snapshot,
                             std::vector<WrittenChunk>* checksums,
                             std::vector<std::string>* files) {
  const int rank = comm_->rank();
  // Every rank keeps the chunks of its last commits (rank 0 whole records,
  // the others their own): no read (and, on the others, no re-open of their
  // handle) for those among the checkpoints compared with. What it kept of
  // the others (deleted, or beyond the depth) goes first.
  ForgetUncompared(p.base_ids, &kept_commits_);
  KeptCommits read;
  const planner::ComparedCheckpoints compared =
      ComparedWith(kept_commits_, *store_, p.base_ids, p.plan, p.mine, rank,
                   comm_->size(), &read);
  const WriteContext context{p.id,
                             rank,
                             comm_->size(),
                             io_threads(),
                             !p.base_ids.empty() || options_.incremental,
                             &compared,
                             snapshot,
                             devices_.copier,
                             &checked_chunks_};
  CKPTDB_RETURN_IF_ERROR(
      WriteStaged(*store_, p.plan, p.mine, p.order, context, checksums, files));
  std::set<int64_t> holders;
  for (const WrittenChunk& chunk : *checksums) {
    if (chunk.holder_id != 0) holders.insert(chunk.holder_id);
  }
  checked_chunks_.EndSave(holders);
  return Status::OK();
}

Result<SaveOutcome> DBImpl::CommitOnEveryRank(
    PreparedSave& p, const Status& written,
    const std::vector<std::string>& files,
    const std::vector<WrittenChunk>& checksums) {
  const bool root = comm_->rank() == 0;
  const std::string change = "checkpoint id " + std::to_string(p.id);
  Result<std::vector<std::string>> results =
      GatherToRoot(*comm_, EncodeWritten(written, files, checksums));
  // Rank 0 commits only with every report; another rank's failed send may
  // have reached it.
  if (!results.ok()) {
    return root ? results.status()
                : OutcomeNotLearned(results.status(),
                                    change + " may be committed");
  }
  std::string outcome;
  if (root) {
    outcome =
        CommitOnRoot(*store_,
                     {p.classes, options_.max_chunk_bytes,
                      p.whole_plan ? &p.plan : nullptr, p.id, p.base_ids,
                      p.options, comm_->size(), options_.incremental_depth},
                     *results, &kept_commits_,
                     {options_.keep_last, options_.keep_every_steps});
    if (!options_.incremental) kept_commits_.clear();
  }
  const std::string own_outcome = outcome;  // rank 0's: what it did
  Status shared = comm_->Broadcast(&outcome, 0);
  SaveOutcome decoded;
  if (shared.ok()) shared = DecodeSaveOutcome(outcome, &decoded);
  if (shared.ok()) return decoded;
  // The commit may have happened while some rank cannot learn of it: no rank
  // says that nothing was committed unless it knows.
  kept_commits_.clear();
  if (!root) return OutcomeNotLearned(shared, change + " may be committed");
  SaveOutcome own;
  CKPTDB_ASSERT(DecodeSaveOutcome(own_outcome, &own).ok());
  if (!own.status.ok()) return own.status;
  return OutcomeNotShared(shared, change + " is committed");
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
  // What the next incremental saves compare with (rank 0's whole record is
  // kept by CommitOnRoot). After a failure nothing kept is trusted.
  if (comm_->rank() != 0) {
    if (outcome.status.ok() && written.ok() && options_.incremental) {
      KeepCommit(OwnChunks(outcome.info.id, p.plan, p.mine, checksums),
                 options_.incremental_depth, &kept_commits_);
    } else {
      kept_commits_.clear();
    }
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
  CKPTDB_RETURN_IF_ERROR(WaitPending());
  return NotingPeerClosing(SaveNow(state, options));
}

Result<CheckpointInfo> DBImpl::SaveNow(const StateDict& state,
                                       const SaveOptions& options) {
  CKPTDB_ASSIGN_OR_RETURN(PreparedSave p,
                          PrepareSave(state, options, true, "save", {}));
  return FinishSave(p, nullptr);
}

}  // namespace ckptdb::engine
