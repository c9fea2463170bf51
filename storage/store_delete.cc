// Deleting checkpoints: the journal's step, the records, then the chunks that
// no remaining record refers to (their table files, value files and the copy
// of their locations), either before Delete returns or, for a retention's
// delete, on the store's FileRemover thread.
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>

#include <filesystem>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "storage/chunk_files.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"
#include "storage/record_copies.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {

void StoreImpl::LinkTablesForLater(int64_t checkpoint_id,
                                   FileRemover::Batch* later) {
  Result<rocksdb::TablePropertiesCollection> tables =
      ChunkTablesOf(checkpoint_id, "the chunk table files");
  // After a failed write the file system removes nothing until a reopen.
  if (!tables.ok() || fs_->write_failed()) return;
  for (const auto& [table, props] : *tables) {
    const std::string link = StagingDir(path_) + "/" + kDeletedTablePrefix +
                             std::filesystem::path(table).filename().string();
    // Without the link (no staging directory, the name taken) RocksDB's
    // unlink frees the table's space itself.
    if (fs_->LinkForRemoval(table, link).ok()) later->files.push_back(link);
  }
}

Status StoreImpl::DropChunks(int64_t checkpoint_id, FileRemover::Batch* later) {
  ForgetIndex(checkpoint_id);
  const std::string begin = CheckpointKeyPrefix(checkpoint_id);
  const std::string end = CheckpointKeyEnd(checkpoint_id);
  rocksdb::Slice b(begin), e(end);
  if (later) LinkTablesForLater(checkpoint_id, later);
  // A checkpoint's chunks fill whole table files of their own (ingested, never
  // compacted): removing the files removes them, with no tombstone and no
  // compaction (whose failure paths trip assertions in Debian's RocksDB).
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(rocksdb::DeleteFilesInRange(db_.get(), chunks_, &b, &e, false),
                "removing the chunk files of checkpoint " +
                    std::to_string(checkpoint_id)));
  if (LiveChunkIds().contains(checkpoint_id)) {
    return Status::Internal("chunk files of checkpoint " +
                            std::to_string(checkpoint_id) + " in '" + path_ +
                            "' share files with other checkpoints");
  }
  // The value files go with the table files: no key of another checkpoint
  // points into them (value_files.h); so does the copy of their locations.
  if (later) {
    later->value_dirs.push_back(checkpoint_id);
  } else {
    CKPTDB_RETURN_IF_ERROR(ValueDirs().Remove(checkpoint_id));
  }
  return RemoveCopy(CopyKind::kLocators, checkpoint_id);
}

Result<std::vector<int64_t>> StoreImpl::UnusedValueDirs(
    const std::set<int64_t>& live) {
  CKPTDB_ASSIGN_OR_RETURN(std::vector<int64_t> ids, ValueDirs().Ids());
  if (ids.empty()) return ids;
  // A checkpoint whose record (or a later record) uses its chunks keeps its
  // value files even when its table files are gone (damage): the copy of
  // their locations still reaches them.
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> records, RecordIds());
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> referenced, ReferencedIds());
  std::erase_if(ids, [&](int64_t id) {
    return live.contains(id) || records.contains(id) || referenced.contains(id);
  });
  return ids;
}

ValueDirectories StoreImpl::ValueDirs() {
  return ValueDirectories(*fs_, path_);
}

void StoreImpl::RemoveUnusedValueDirs(const std::set<int64_t>& live) {
  Result<std::vector<int64_t>> unused = UnusedValueDirs(live);
  if (!unused.ok()) return;
  for (int64_t id : *unused) (void)ValueDirs().Remove(id);
}

void StoreImpl::RemoveDeletedTableLinks() {
  const std::string staging = StagingDir(path_);
  Result<std::vector<std::string>> names = fs_->ListDir(staging);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    if (name.starts_with(kDeletedTablePrefix))
      (void)fs_->Remove(staging + "/" + name);
  }
}

Status StoreImpl::CompactDeletedRecords(int64_t checkpoint_id) {
  const std::string begin = MetaKey(checkpoint_id);
  const std::string end = MetaRangeEnd(checkpoint_id);
  const rocksdb::Slice from(begin), to(end);
  return FromRocks(
      db_->CompactRange(rocksdb::CompactRangeOptions(), meta_, &from, &to),
      "compacting the deleted records of checkpoint " +
          std::to_string(checkpoint_id) + " in store '" + path_ + "'");
}

Status StoreImpl::Delete(int64_t checkpoint_id, FileRemoval removal) {
  CKPTDB_RETURN_IF_ERROR(RequireWritable("deleting"));
  remover_.Wait();
  FileRemover::Batch remove_later;
  FileRemover::Batch* later =
      removal == FileRemoval::kInBackground ? &remove_later : nullptr;
  Status s = DeleteOnce(checkpoint_id, later);
  // On a full disk, the reserve makes room for the few writes a delete needs:
  // released here, or already by the reopen that followed the failed write
  // (then ReleaseReserve finds none, and the retry is the room's only use).
  bool released = false;
  if (IsNoSpace(s)) {
    (void)ReleaseReserve();
    released = true;
    s = DeleteOnce(checkpoint_id, later);
  }
  if (s.ok() && released && !remove_later.empty()) {
    reserve_released_ = true;  // once the removal gave the space back
  } else if (s.ok()) {
    EnsureReserve();
  }
  // Last, so that the delete's own file operations all come before the
  // removal's. Whatever the outcome: what is in the batch is garbage (after
  // a failure, the reopen's RemoveLeftovers may have removed it already).
  if (!remove_later.empty()) remover_.Start(path_, std::move(remove_later));
  return s;
}

Status StoreImpl::DeleteOnce(int64_t checkpoint_id, FileRemover::Batch* later) {
  std::shared_lock lock(mu_);
  CKPTDB_RETURN_IF_ERROR(EnsureOpenShared(lock));
  CKPTDB_RETURN_IF_ERROR(ReopenAfterFailedWrites(lock));
  if (later) {
    // Under the lock: a reopen on another thread replaces both.
    later->fs = fs_;
    later->log = db_->GetDBOptions().info_log;
  }
  rocksdb::PinnableSlice record;
  CKPTDB_RETURN_IF_ERROR(GetRecord(checkpoint_id, &record));
  CKPTDB_ASSIGN_OR_RETURN(
      CheckpointInfo info,
      DecodeCheckpointInfo(std::string_view(record.data(), record.size())));
  record.Reset();
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> records, RecordIds());
  const std::string what =
      "the deletion of checkpoint " + std::to_string(checkpoint_id);
  CommitJournal journal = *catalogue_.journal();
  journal.committed.erase(checkpoint_id);
  // The checkpoint, and the deleted checkpoints whose chunks it kept (which
  // may now be unreferenced): each loses its chunks once no remaining record
  // refers to them.
  std::set<int64_t> freeing = {checkpoint_id};
  for (int64_t held : info.references) {
    if (!records.contains(held)) freeing.insert(held);
  }
  journal.deleting.insert(freeing.begin(), freeing.end());
  // From the journal's write on the checkpoint is gone; an interrupted delete
  // is finished by the next read-write open.
  Status s = SaveJournal(journal);
  if (s.ok()) s = DeleteRecord(checkpoint_id);
  // After the records are gone: a listing that read them before the journal
  // changed may have remembered the info meanwhile.
  memo_.ForgetInfo(checkpoint_id);
  if (s.ok()) s = DropUnreferenced(freeing, later);
  if (s.ok()) {
    for (int64_t id : freeing) journal.deleting.erase(id);
    s = SaveJournal(std::move(journal));
  }
  if (!s.ok()) {
    return Reopen(s, lock, what, [&] {
      return catalogue_.journal() && !catalogue_.Committed(checkpoint_id);
    });
  }
  // The deletion is complete: a failed compaction leaves it so (the
  // tombstones stay until a later one).
  Status compacted = CompactDeletedRecords(checkpoint_id);
  (void)compacted;
  (void)FitMetaCache(0);  // fewer live records: less room kept for them
  return Status::OK();
}

Result<std::set<int64_t>> StoreImpl::ReferencedIds() {
  CKPTDB_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, VisibleInfos());
  std::set<int64_t> referenced;
  for (const CheckpointInfo& info : infos)
    referenced.insert(info.references.begin(), info.references.end());
  return referenced;
}

Status StoreImpl::DropUnreferenced(const std::set<int64_t>& candidates,
                                   FileRemover::Batch* later) {
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> records, RecordIds());
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> referenced, ReferencedIds());
  for (int64_t id : candidates) {
    if (!records.contains(id) && !referenced.contains(id))
      CKPTDB_RETURN_IF_ERROR(DropChunks(id, later));
  }
  return Status::OK();
}

}  // namespace ckptdb::storage
