#pragma once

// The store's implementation: the executor over the store's pieces (the
// checkpoint catalogue, the ingester, value directories, the chunk file
// reader, the recovery decision; docs/design.md, "The store's pieces"). Its
// methods are spread over store.cc (commits, listings, deletes, checks),
// store_open.cc (opening, recovery), store_metadata.cc (records),
// store_reads.cc (chunk reads through RocksDB), store_copies.cc (the second
// copies of the metadata) and staged_file_writer.cc. Private to storage/.

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "storage/buffer_pool.h"
#include "storage/catalogue.h"
#include "storage/chunk_files.h"
#include "storage/chunk_reader.h"
#include "storage/column_families.h"
#include "storage/commit_journal.h"
#include "storage/file_system.h"
#include "storage/ingester.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"
#include "storage/record_copies.h"
#include "storage/record_memo.h"
#include "storage/store.h"
#include "storage/value_files.h"
#include "storage/writer_claim.h"

namespace ckptdb::storage {

// An I/O error from a full file system.
bool IsNoSpace(const Status& s);

// What comparing a store's metadata with its second copies found
// (StoreImpl::CompareCopies): each entry names the checkpoint id and says
// why.
struct CopyFindings {
  // Records in the `meta` column family damaged or missing; their copy is
  // intact (a read-write open rewrites the column family).
  std::map<int64_t, std::string> records_damaged;
  // Record copies damaged or missing; the records are intact (a read-write
  // open rewrites the copy).
  std::map<int64_t, std::string> copies_damaged;
  // Both damaged: the checkpoint's metadata is lost.
  std::map<int64_t, std::string> both_damaged;
  // Damage in the `meta` column family outside any checkpoint's records (the
  // store marker, an index or footer): why, or empty.
  std::string meta_scan_error;
  // Copies of chunk locations damaged or missing, by the id whose chunks
  // they locate; the table files' own are intact (rewritten by a read-write
  // open).
  std::map<int64_t, std::string> locators_damaged;
  // Copy files of checkpoints without records or chunks (a save or a delete
  // cut short): removed by a read-write open.
  std::vector<std::string> stale;
  // The store has no copies directory: written by a build that kept none.
  // Its missing copies are not damage (a read-write open writes them).
  bool predates_copies = false;
};

// The chunk table files a rebuild of the database at `store` staged to
// ingest again and has not yet (staging/rebuild-*, sorted; none when no
// rebuild is under way or was cut short).
Result<std::vector<std::string>> StagedRebuildTables(StoreFileSystem& fs,
                                                     const std::string& store);

// The files at `paths` that exist, by device and inode (a file under two
// names once).
Result<std::set<std::pair<uint64_t, uint64_t>>> FileIdsOf(
    StoreFileSystem& fs, const std::vector<std::string>& paths);

class StoreImpl : public Store {
 public:
  // `path` as resolved (ResolvedPath); `spelled` as the caller gave it (for
  // the messages of a refused claim).
  StoreImpl(std::string path, StoreOptions options, std::string spelled = "")
      : path_(std::move(path)),
        spelled_(spelled.empty() ? path_ : std::move(spelled)),
        options_(std::move(options)) {}
  ~StoreImpl() override { CloseDb(); }

  // Store::Open: a read-write handle first claims its directory in this
  // process (WriterClaim), then OpenDbRetrying.
  Status Open();

  // Opens RocksDB over a fresh StoreFileSystem, checks it against the commit
  // journal and, read-write, finishes or removes what interrupted saves and
  // deletes left (RecoverCommits).
  Status OpenDb();
  // OpenDb, repeated for a read-only handle while a writer changes the store
  // under it. A read-only open reads the MANIFEST, then the files it names: a
  // writer committing or deleting meanwhile can make it fail (a file
  // replaced), which is tried again for up to ~10 s of the writer's activity.
  // An open that succeeds sees a prefix of the MANIFEST, whose records come
  // with their chunks (ingested before the records are flushed, and nothing
  // is in the WAL) and which the journal check accepted: enough for listings,
  // loads and reads. Such a view may still hold half of a commit or a delete
  // that is under way (chunks of an id without records yet, or no longer),
  // which only a check for leftovers minds: it counts as quiet only when the
  // writer's files (VersionStamp) were the same before and after it.
  // 3 quick tries for a quiet one, then a view that is not quiet stands
  // (its stamp_ differs from the store's files at once), so that a reader
  // beside a writer that commits back-to-back does not wait for it to stop
  // (Check looks again instead).
  Status OpenDbRetrying();

  const std::string& path() const override { return path_; }
  bool read_only() const override { return options_.read_only; }
  Result<std::string> Identity() override;

  Result<std::vector<CheckpointInfo>> List() override;
  Result<int64_t> Resolve(const CheckpointSelector& which) override;
  Result<CheckpointMetadata> GetMetadata(int64_t checkpoint_id) override;
  Result<CheckpointMetadata> GetMetadata(
      int64_t checkpoint_id,
      const std::vector<std::string_view>& tensor_keys) override;
  Result<CheckpointMetadata> GetTensorMetadata(int64_t checkpoint_id,
                                               std::string_view key) override;
  Result<int64_t> NextCheckpointId() override;
  Status CheckTagFree(const std::string& tag) override;
  Status CheckShareable(int64_t checkpoint_id) override;
  Status Commit(const CheckpointMetadata& meta,
                const std::vector<std::string>& staged) override;
  Result<ChunkBuffer> ReadChunk(int64_t checkpoint_id,
                                std::string_view tensor_key,
                                const ChunkMetadata& chunk) override;
  Status ReadChunkInto(int64_t checkpoint_id, std::string_view tensor_key,
                       const ChunkMetadata& chunk, void* dst) override;
  Status ReadChunkScattered(int64_t checkpoint_id, std::string_view tensor_key,
                            const ChunkMetadata& chunk,
                            const std::vector<ChunkPiece>& pieces) override;
  Status ReadChunksScattered(int64_t checkpoint_id,
                             const std::vector<ChunkToRead>& reads) override;
  using Store::VerifyChunk;
  Status VerifyChunk(int64_t checkpoint_id, std::string_view tensor_key,
                     const ChunkMetadata& chunk,
                     std::string* through_copy) override;
  using Store::Delete;
  Status Delete(int64_t checkpoint_id, FileRemoval removal) override;
  Status Refresh() override;
  // Refresh's work for a read-only handle: true when its view was still the
  // store's present state (its files as stamp_ found them before the open,
  // so the open was quiet too), false after opening it again.
  Result<bool> RefreshView();
  void Release() override;
  Result<std::unique_ptr<StagedFileWriter>> NewStagedFile(int64_t checkpoint_id,
                                                          int32_t rank,
                                                          int part) override;
  Result<StoreReport> Check() override;
  // Check's findings on the handle's present view of the store.
  Result<StoreReport> CheckView();
  void RemoveStaged(const std::vector<std::string>& staged_files) override;

  // The `meta` family's block cache capacity as RocksDB reports it; 0 while
  // the handle is closed.
  size_t MetaCacheCapacity();
  // The bytes of blocks that cache holds now.
  size_t MetaCacheUsage() const { return meta_cache_->GetUsage(); }
  // How many walks of every main record this handle has made.
  uint64_t RecordWalks() const { return record_walks_.load(); }

 private:
  // FailedPrecondition for a read-only handle, and for one whose directory
  // is no longer at its path (AtItsPath).
  Status RequireWritable(const char* what) const {
    if (options_.read_only) {
      return Status::FailedPrecondition(std::string(what) +
                                        " needs a read-write store; " + path_ +
                                        " is open read-only");
    }
    return AtItsPath(what);
  }
  // FailedPrecondition naming `what` when the directory this read-write
  // handle opened is no longer the one at its path (moved, removed or
  // replaced since; WriterClaim::StillAtItsPath): RocksDB writes on through
  // the files it holds open,
  // ckptdb and RocksDB's new files would go to the path, and a checkpoint
  // committed so lies half in each.
  Status AtItsPath(const char* what) const;
  // `read` (a chunk read's failure), or FailedPrecondition when it failed
  // while the directory this read-write handle opened is no longer at its
  // path: its chunks are wherever the directory went (or gone with it), not
  // missing from or damaged in the store.
  Status ReadAtItsPath(Status read) const;
  std::string NotAtItsPath() const;  // the words of both
  void CloseDb();
  // Forgets what the handle knows of checkpoint `checkpoint_id`'s files.
  void ForgetIndex(int64_t checkpoint_id);
  // OpenDb's steps.
  // Whether the directory holds a database; creates it (and the CREATING
  // marker) when absent and asked to.
  Result<bool> PrepareDirectory();
  // Removes what an interrupted creation left (`names`, but the CREATING
  // marker) and starts the creation: the directory and its marker, synced.
  Status StartCreation(const std::vector<std::string>& names);
  // Opens the database (read-only: without writes). `lenient`: without
  // RocksDB's paranoid checks, as a read-only handle always opens, for a
  // read-write handle's reads of a database those checks refuse.
  Status OpenRocks(bool has_db, bool read_only, bool lenient = false);
  // FailedPrecondition naming the holder when `s`, RocksDB's open error, says
  // a writer (another process, another handle, a forked child's parent)
  // holds the database's lock; nullopt otherwise.
  std::optional<Status> WriterHoldsLock(const rocksdb::Status& s);
  // The database at path_ has ckptdb's column families: InvalidArgument for
  // another RocksDB database, Corruption when a store's description is lost.
  Status CheckColumnFamilies(const rocksdb::DBOptions& db_options);
  Status CheckStoreMarker(bool has_db);
  // Whether either copy of the commit journal is on disk.
  Result<bool> HasJournal();
  // Reads the journal and checks every committed checkpoint has its record
  // (Corruption naming the files otherwise). Read-write, also adopts records
  // committed after the journal's last write and finishes interrupted
  // deletes, then removes chunks of ids that provably never committed.
  Status RecoverCommits();
  Status CheckJournal(const std::set<int64_t>& records);
  // When the journal lists checkpoints (`lost`) that the database's
  // `records` lack, and the database proves the journal stale (it holds a
  // record above the journal's high-water mark, and no chunk of a lost
  // checkpoint that nothing shares is left): the lost checkpoints were
  // deleted after the journal was written. Drops them from the catalogue's
  // journal and says true; false (journal unchanged) otherwise.
  bool AdoptDeletionsAfterStaleJournal(const std::set<int64_t>& records,
                                       const std::set<int64_t>& lost);
  // Read-write opens check the database read-only first: RocksDB's
  // read-write recovery rewrites the MANIFEST and removes the files it does
  // not name, which would make a loss it did not report permanent.
  Status PreCheckReadOnly(bool has_db);
  // Ids of the checkpoint records in the `meta` column family (and of those
  // only their copies hold): walked once, then known (record_ids_).
  Result<std::set<int64_t>> RecordIds();
  Status SaveJournal(CommitJournal journal);
  // The records of a checkpoint as stored equal `records` (key, value; in key
  // order), with no other record in its range.
  Status ReadBack(
      int64_t checkpoint_id,
      const std::vector<std::pair<std::string, std::string>>& records);
  // Removes a checkpoint's records (main, tensor and small tensors' records),
  // durably.
  Status DeleteRecord(int64_t checkpoint_id);
  // GetTensorMetadata's work when the records are whole and there: from the
  // decoded main record of `checkpoint_id` (DecodedRecord), the tensor's own
  // record read if it has one.
  Result<CheckpointMetadata> TensorFromDecodedRecord(int64_t checkpoint_id,
                                                     std::string_view key);
  // The main record of `checkpoint_id` decoded without paths, its small
  // tensors' chunks filled in: kept by memo_ when its bytes are few enough.
  Result<std::shared_ptr<const MainRecord>> DecodedRecord(
      int64_t checkpoint_id);
  // The main record of `checkpoint_id` (GetRecord) decoded, with or without
  // its paths; Corruption when it claims another id. `record_bytes`, when
  // given, receives its encoded size.
  Result<MainRecord> ReadMainRecord(int64_t checkpoint_id,
                                    const rocksdb::ReadOptions& read,
                                    bool paths, size_t* record_bytes = nullptr);
  // GetMetadata's work: every tensor's chunks, or those of `tensor_keys` only.
  Result<CheckpointMetadata> ReadMetadata(
      int64_t checkpoint_id, const std::vector<std::string_view>* tensor_keys);

  // Fills the chunks of a checkpoint's tensors from their records, all of
  // them or those of `tensor_keys` (formats 2 to 4; in format 4 the tensors
  // that have records of their own).
  Status ReadAllTensorRecords(const rocksdb::ReadOptions& read,
                              MainRecord* main);
  // `wanted`: sorted, each key once.
  Status ReadTensorRecords(const rocksdb::ReadOptions& read,
                           const std::vector<std::string_view>& wanted,
                           MainRecord* main);
  // The chunks of the small tensors (format 4) from their record: all, or
  // those `wanted` (sorted, each key once) names when given.
  Status ReadSmallTensors(const rocksdb::ReadOptions& read,
                          const std::vector<std::string_view>* wanted,
                          MainRecord* main);
  // `wanted`: sorted, each key once.
  Status WalkTensorRecords(const rocksdb::ReadOptions& read,
                           const std::vector<std::string_view>& wanted,
                           MainRecord* main);
  // Writes `batch` to the meta column family and flushes it into a table file:
  // metadata never lives in RocksDB's write-ahead log, whose damage RocksDB
  // recovers from by dropping what follows it.
  Status WriteMeta(rocksdb::WriteBatch* batch, const std::string& what);
  // Compacts the meta column family once it has kMetaCompactionTrigger table
  // files in level 0 (each WriteMeta adds one), so that lookups stay cheap.
  // Metadata is compacted only here and by CompactDeletedRecords, at steps the
  // store chooses, never in the background (MetaCfOptions).
  Status CompactMetaIfDeep();
  // Compacts the deleted checkpoint's range of the meta column family: its
  // records and their tombstones go, so that walks of the records (listings,
  // which start from the lowest key) do not step over them one by one.
  Status CompactDeletedRecords(int64_t checkpoint_id);
  // Checks every metadata table file's whole-file checksum and, where it
  // differs (or the file has none), every block's: Corruption naming the file
  // when one is damaged. A read-write open runs it before anything may compact
  // those files, since reads alone skip the blocks that newer records shadow.
  Status VerifyMetaTables();
  // Each table file of column family `family` (kMetaCf or kChunksCf): its
  // whole-file checksum and, unless it matches, its block checksums (both OK
  // for an intact file; whole_file OK for a file written without one).
  struct TableCheck {
    std::string path;
    rocksdb::Status blocks;
    rocksdb::Status whole_file;
  };
  // (The files are read on up to 8 threads.)
  std::vector<TableCheck> CheckTables(const std::string& family);
  // The options a table file of column family `family` is read and written
  // with, over this store's file system.
  rocksdb::Options TableFileOptions(const std::string& family) const;
  // Whether every block of the table file at `table` (of column family
  // `family`) checks (Corruption naming it otherwise).
  Status BlocksIntact(const std::string& table, const std::string& family);
  // The live chunk table files whose bytes differ from those they were
  // written with: CheckTables finds a block or the whole-file checksum
  // failing.
  std::set<std::string> DamagedChunkTables();
  // In a read-only open: true when the `kind` copy of `checkpoint_id`, not
  // found now, is missing only because the store changed since this view was
  // taken: a delete since may have removed it (the journal on disk no longer
  // counts the checkpoint as committed), or the view holds a commit that was
  // under way, whose copy is not written yet or whose commit did not
  // complete. Always false in a read-write open.
  bool MissingCopyIsOutsideTheView(int64_t checkpoint_id, CopyKind kind);
  // After a failed commit or delete: the database is reopened, which reads
  // what reached the disk and recovers it; `happened` then tells whether the
  // operation took effect (OK) or not (`error`). When the reopen fails too,
  // the error says the operation may have happened.
  template <typename Happened>
  Status Reopen(Status error, std::shared_lock<std::shared_mutex>& lock,
                const std::string& what, Happened&& happened);
  // Reopen for a commit that failed before its records were written (while
  // ingesting its chunks): it is not committed whatever the reopen finds,
  // so `error` is returned, saying so when the reopen fails too.
  Status ReopenBeforeCommitPoint(Status error,
                                 std::shared_lock<std::shared_mutex>& lock,
                                 const std::string& what);
  // Closes and opens the database again (taking `lock`'s mutex exclusively
  // meanwhile), only where the handle's directory still is; with the
  // reserve's space when the disk is full.
  Status ReopenNow(std::shared_lock<std::shared_mutex>& lock);
  // One try of Delete; `later` as DropChunks.
  Status DeleteOnce(int64_t checkpoint_id, FileRemover::Batch* later);
  // Reopens the database when a background job of this handle failed (a
  // compaction of the `meta` column family during a faulted save): RocksDB
  // then refuses every later write, such as the next commit's ingestion. Also
  // when any write through this handle failed: the file system then refuses
  // deletions until a re-open. Called as a save starts, before it stages
  // files, and as a delete starts.
  Status ReopenAfterFailedWrites(std::shared_lock<std::shared_mutex>& lock);
  // The reserve: a file of kReserveBytes kept in the store so that on a full
  // disk an open and a delete still find room for their few writes.
  // EnsureReserve writes it when absent, short (a write on a full disk left
  // it so) or with other names (hard links: replaced, never written
  // through), and, with `repair` (a read-write open, a save after a full
  // disk's delete), when damaged or sparse (ReserveDamage) (best effort);
  // EnsureReserveLocked does the same under the caller's lock of mu_ and
  // returns the failure. ReleaseReserve removes it and says whether there
  // was one.
  void EnsureReserve(bool repair = false);
  Status EnsureReserveLocked(bool repair);
  // As a save starts, under the caller's lock of mu_: writes the reserve
  // when absent or short, and refuses the save when it cannot (no room on
  // the disk, which the save would take from a delete that frees space; an
  // entry there that is not ckptdb's; a failed write). A reserve that cannot
  // be looked at leaves the save to go on.
  Status ReserveForSave(bool repair);
  // "PATH is a symbolic link, where the store keeps its reserve file ..."
  // when something other than a regular file is there (not ckptdb's: its
  // file system neither writes nor removes it), or nullopt.
  std::optional<std::string> ForeignReserve() const;
  bool ReleaseReserve();
  // What is wrong with the reserve file at `path` (other names, holes, bytes
  // other than zeros), or nullopt (also when there is none, or it cannot be
  // read). Reads it whole.
  static std::optional<std::string> ReserveDamage(StoreFileSystem& fs,
                                                  const std::string& path);
  // Read-write: records RocksDB's IDENTITY file under kIdentityKey the first
  // time (a store created before this record was kept; a new store records
  // it with its marker), and writes the file again from that record when it
  // differs.
  Status KeepIdentity();
  // Adds RocksDB's IDENTITY file, as it is, to `batch` as kIdentityKey.
  void PutIdentity(rocksdb::WriteBatch* batch);
  // Check's lines for a damaged or missing IDENTITY file, or reserve.
  void ReportMarkerFiles(StoreReport* report);
  // Adds to the report each table file whose blocks pass their checksums but
  // whose whole-file checksum does not (a flipped byte in a footer's padding,
  // which no read sees): a metadata table to the repairable metadata (a
  // read-write open rebuilds it), a chunk table to damaged_chunk_tables.
  void ReportTablesOutsideBlocks(StoreReport* report);
  // Opens the database if a failed reopen left it closed.
  Status EnsureOpen();
  // EnsureOpen from under a shared lock (taken exclusively meanwhile).
  Status EnsureOpenShared(std::shared_lock<std::shared_mutex>& lock);
  // IOError while a failed reopen left the database closed.
  Status CheckOpen() const;
  // The main record of a checkpoint; NotFound naming it when absent.
  Status GetRecord(int64_t checkpoint_id, rocksdb::PinnableSlice* record,
                   const rocksdb::ReadOptions& read = rocksdb::ReadOptions());
  // Names, sizes and times of the files a writer changes; equal stamps mean
  // nothing to refresh.
  Result<std::string> VersionStamp() const;
  Status RemoveLeftovers();
  // StoreReport::foreign_entries.
  std::vector<std::string> ForeignEntries();
  // The ingester over the open database.
  ChunkIngester Ingester();
  // Drops checkpoint `checkpoint_id`'s chunk table files and the copy of
  // their locations, and removes its value directory; with `later`, the
  // files' space is left to remover_: the value directory goes into the
  // batch, and so do links to the table files (LinkTablesForLater).
  Status DropChunks(int64_t checkpoint_id, FileRemover::Batch* later = nullptr);
  // Best effort: links each chunk table file of checkpoint `checkpoint_id`
  // under the staging directory and adds the link to `later`, so that
  // RocksDB's unlink of the table drops a name, not the file's pages.
  void LinkTablesForLater(int64_t checkpoint_id, FileRemover::Batch* later);
  // The value directories over the store's file system.
  ValueDirectories ValueDirs();
  // The value files the table files of checkpoint `checkpoint_id` point into.
  Result<std::vector<ValueFileExtent>> NamedValueFiles(int64_t checkpoint_id);
  // The properties of the chunk tables holding checkpoint `checkpoint_id`'s
  // chunks; an error names `what` was being read.
  Result<rocksdb::TablePropertiesCollection> ChunkTablesOf(
      int64_t checkpoint_id, const std::string& what);
  // Checkpoint ids with a value directory but no key in `live` (LiveChunkIds).
  Result<std::vector<int64_t>> UnusedValueDirs(const std::set<int64_t>& live);
  // Best effort: removes the value directories of checkpoints not in `live`
  // (LiveChunkIds: leftovers of interrupted saves and deletes). What cannot be
  // removed stays, for Check to report and a later call to retry.
  void RemoveUnusedValueDirs(const std::set<int64_t>& live);
  // Best effort: removes the links LinkTablesForLater made that a failed
  // removal left in the staging directory (a read-write open empties it).
  void RemoveDeletedTableLinks();
  // IOError unless the value file a staged file points into is there and
  // long enough.
  Status CheckValueFile(const std::string& staged,
                        const ValueFileExtent& values);
  // Ids of earlier checkpoints whose chunks the visible records share
  // (incremental saves).
  Result<std::set<int64_t>> ReferencedIds();
  // The infos of the visible records, by id; the caller holds mu_. From the
  // known record ids and infos when the handle knows them, else by a walk.
  Result<std::vector<CheckpointInfo>> VisibleInfos();
  // VisibleInfos by a walk of every main record; remembers the ids it saw.
  Result<std::vector<CheckpointInfo>> WalkVisibleInfos();
  // The info of record `checkpoint_id`, read and decoded alone; nullopt when
  // it cannot be (the walk then reports the damage).
  std::optional<CheckpointInfo> ReadInfo(int64_t checkpoint_id);
  // Drops the chunks of each of `candidates` that neither has a record nor is
  // referred to by one: bytes no remaining checkpoint uses.
  // `later` as DropChunks.
  Status DropUnreferenced(const std::set<int64_t>& candidates,
                          FileRemover::Batch* later);
  // FailedPrecondition unless the store holds the chunks of every checkpoint
  // `info` refers to.
  Status CheckReferencesHeld(const CheckpointInfo& info);
  // Corruption unless every value file of checkpoint `held`, whose chunks
  // checkpoint `id` shares, is there and long enough (a stat each; each held
  // checkpoint is checked once per handle, its files being immutable).
  Status CheckHeldValueFiles(int64_t id, int64_t held);
  // "value file P is missing" (or "... holds N bytes, its chunks need M") for
  // the first value file of checkpoint `held` that is not whole; empty when
  // every one is.
  Result<std::string> ValueFileLoss(int64_t held);
  // "chunk table files are not in the database ..." when checkpoint `held`
  // held chunks in table files that the database no longer has (a rebuild
  // set them aside); empty otherwise. `live`: LiveChunkIds(). For `held` ==
  // `checkpoint_id` (a checkpoint that may share all it has), only when it
  // had table files.
  Result<std::string> ChunkTableLoss(int64_t held, int64_t checkpoint_id,
                                     const std::set<int64_t>& live);
  // Reads the chunk through RocksDB into `buffer` and verifies it, and
  // RocksDB the blocks it reads. A chunk in a value file has its pointer read
  // through RocksDB, and its bytes from the value file.
  Status ReadThroughRocks(int64_t checkpoint_id, std::string_view tensor_key,
                          const ChunkMetadata& chunk, const std::string& key,
                          ChunkBuffer* buffer);
  // ReadThroughRocks (then, for a damaged location, through the copy of the
  // chunk's location) into `read`'s pieces; `key` is the chunk's storage key.
  Status ReadThroughRocksInto(int64_t checkpoint_id, const ChunkToRead& read,
                              const std::string& key);
  // Reads the bytes `pointer` (a value of chunk `chunk`) points at into
  // `buffer`.
  Status ReadPointedValue(int64_t checkpoint_id, std::string_view tensor_key,
                          const ChunkMetadata& chunk,
                          const ValuePointer& pointer, ChunkBuffer* buffer);
  // The error for a chunk `what` of checkpoint `checkpoint_id` whose value
  // file is gone: NotFound when the checkpoint was deleted meanwhile,
  // Corruption otherwise.
  Status ValueFileGone(int64_t checkpoint_id, const std::string& what);
  // Whether the journal on disk no longer lists `checkpoint_id` as committed
  // (a writer deleted it after this handle read its record).
  bool DeletedSinceOpen(int64_t checkpoint_id);
  // Checkpoint ids that some live chunk file holds keys of.
  std::set<int64_t> LiveChunkIds();
  // LiveChunkIds as of a version of the `chunks` family's files (RocksDB's
  // super version number, which a reopen starts again: CloseDb forgets it).
  std::mutex live_ids_mu_;
  std::optional<std::pair<uint64_t, std::set<int64_t>>> live_ids_;
  // Calls fn(id, main record bytes) for every committed checkpoint: in id
  // order from the `meta` column family, then those only their copies hold
  // (record_copies.h); fn returns false to stop. Tensor records are skipped
  // unread.
  template <typename Fn>
  Status ForEachRecord(Fn&& fn);

  // ---- Second copies of the metadata (store_copies.cc) ----
  // The copy of checkpoint `checkpoint_id`'s chunk locations, from the
  // properties of its table files, encoded (copy_encoder_); nullopt when none
  // of its table files keeps chunk locations. Reads only: safe beside a write.
  Result<std::optional<std::string>> EncodeLocatorCopy(int64_t checkpoint_id);
  // Writes that copy.
  Status WriteLocatorCopy(int64_t checkpoint_id);
  // A commit's two copies, encoded: where its chunks lie (when `located`:
  // it ingested table files) and its records.
  struct EncodedCopies {
    std::optional<std::string> locators;
    std::string records;
  };
  Result<EncodedCopies> EncodeCopies(int64_t checkpoint_id, bool located,
                                     const CopyEntries& records);
  Status WriteCopies(int64_t checkpoint_id, const EncodedCopies& copies);
  // How long each step of a commit took, for the LOG (one INFO line per
  // commit: where a slow commit spends its time).
  struct CommitSteps {
    using Clock = std::chrono::steady_clock;
    Clock::time_point start = Clock::now();
    Clock::time_point last = start;
    Clock::duration ingest{}, records{}, copies_wait{}, copies_write{},
        journal{};
    // Adds the time since the previous lap to `*step`.
    void Lap(Clock::duration* step) {
      const Clock::time_point now = Clock::now();
      *step += now - last;
      last = now;
    }
    Clock::duration Total() const { return last - start; }
  };
  void LogCommitSteps(int64_t checkpoint_id, const CommitSteps& steps,
                      size_t meta_cache_bytes);
  // Sizes the `meta` block cache to the family's live table files and two
  // commits of the most records this handle committed, counting a commit of
  // `record_bytes` now (0 at an open) (MetaCacheBytesFor); returns the
  // capacity then, as RocksDB reports it.
  size_t FitMetaCache(size_t record_bytes);
  size_t ReportedMetaCacheCapacity();
  // Removes one copy file (of a checkpoint the journal no longer names).
  Status RemoveCopy(CopyKind kind, int64_t checkpoint_id);
  // Checkpoint ids with a copy of `kind` (intact or not).
  Result<std::set<int64_t>> CopyIds(CopyKind kind);
  // The records of a checkpoint as the `meta` column family holds them,
  // block checksums verified; NotFound when it holds none.
  Result<CopyEntries> ReadRocksRecords(int64_t checkpoint_id);
  // ForEachRecord's fallback: calls fn for the main records of the copies of
  // checkpoints not in `seen`, when the scan of the `meta` column family
  // failed (`scanned`) or missed a committed checkpoint. OK when the copies
  // stand in for what the scan could not read.
  Status ForEachCopiedRecord(
      const std::set<int64_t>& seen, const Status& scanned,
      const std::function<bool(int64_t, std::string_view)>& fn);
  // The main record of a checkpoint from its copy, into `record`.
  Status MainRecordFromCopy(int64_t checkpoint_id,
                            rocksdb::PinnableSlice* record);
  // ReadMetadata from the copy of the records.
  Result<CheckpointMetadata> MetadataFromCopy(
      int64_t checkpoint_id, const std::vector<std::string_view>* tensor_keys);
  // Reads a chunk through the copy of its location (for when its table
  // file's pointer, index or footer is damaged) into `buffer`, verified.
  Status ReadThroughCopy(int64_t checkpoint_id, std::string_view tensor_key,
                         const ChunkMetadata& chunk, const std::string& key,
                         ChunkBuffer* buffer);
  // The chunk table files that may hold the keys first..last: the live one
  // with that range, else those a rebuild set aside and those on disk that
  // RocksDB does not know.
  std::vector<std::string> TablesWithRange(const std::string& first,
                                           const std::string& last);
  // The table files a rebuild set aside (damaged/<n>/*.sst).
  std::vector<std::string> SetAsideTables();
  // Reads chunk `chunk` from byte `offset` of the file at `path` into
  // `buffer` and checks its checksum; `what` names it in errors.
  Status ReadAtCopiedPlace(const std::string& path, const std::string& what,
                           uint64_t offset, const ChunkMetadata& chunk,
                           ChunkBuffer* buffer);
  // Compares the metadata with its copies (every record, a full scan of the
  // `meta` column family, every live checkpoint's chunk locations).
  Result<CopyFindings> CompareCopies();
  // CompareCopies' steps.
  Result<std::set<int64_t>> CompareRecordCopies(CopyFindings* found);
  void ScanMetaFamily(CopyFindings* found);
  Status CompareLocatorCopies(const std::set<int64_t>& ids,
                              CopyFindings* found);
  // A read-write open's repair: rewrites each damaged copy from the intact
  // one (the whole `meta` column family when any of it is damaged) and
  // removes stale copies.
  Status RepairCopies();

  // ---- Chunk tables written again from their copies (store_table_restore.cc)
  // A read-write open's repair of the chunk table files: one RocksDB no
  // longer holds (a rebuild set it aside as unreadable, or it is gone) and a
  // live one whose whole-file checksum fails are written again from
  // the copy of their chunk locations and the records (a small chunk's bytes
  // read at its copied place and checked; a pointer rebuilt from the value
  // file's name and the chunk's place and size), ingested in their place (a
  // live damaged file kept under damaged/<n>/), and the copy written again
  // from the new files. A copy that places chunks where the live table of its
  // key range does not is written again too. A table that cannot be written
  // again (its chunks lost, no room) is left as it was and named in the LOG:
  // reads keep using the copy.
  Status RestoreChunkTables();
  // RestoreChunkTables' steps. The live chunk tables by the key range their
  // own properties record: path and locations blob.
  struct LiveTable {
    std::string path, blob;
  };
  using LiveTables = std::map<std::pair<std::string, std::string>, LiveTable>;
  Result<LiveTables> LiveTablesByRange();
  // The checkpoints whose chunks a committed checkpoint reads.
  Result<std::set<int64_t>> NeededChunkIds();
  // The locations of checkpoint `id`'s tables to check and restore: its copy
  // (when `copied` and it reads) and those of `aside` (SetAsideLocations)
  // where neither a live table (their key ranges: `live`) nor the copy
  // places chunks.
  using KeyRanges = std::vector<std::pair<std::string, std::string>>;
  CopyEntries LocationsToRestore(int64_t id, bool copied, CopyEntries aside,
                                 const KeyRanges& live);
  // The chunk locations the tables set aside under damaged/ record in their
  // own properties, by checkpoint id (those whose properties read).
  std::map<int64_t, CopyEntries> SetAsideLocations();
  // Writes the copy of checkpoint `id`'s chunk locations from its live table
  // files, keeping those of `earlier` (the copy as it was) whose key range
  // holds no live table.
  Status RewriteLocatorCopy(int64_t id, const CopyEntries& earlier);
  // A chunk whose bytes a checkpoint's key range holds: its tensor and record.
  struct StoredChunk {
    std::string tensor_key;
    ChunkMetadata chunk;
  };
  // Those of one checkpoint's key range, by storage key.
  using StoredChunks = std::map<std::string, StoredChunk>;
  // Every committed checkpoint's chunks, by the checkpoint whose key range
  // holds their bytes.
  Result<std::map<int64_t, StoredChunks>> ChunksByHolder();
  // Writes the table of checkpoint `id` that `locations` describes (the
  // copy's `table`-th) from `chunks` (its key range's), replacing the live
  // table file `replaced` (empty when RocksDB holds none of that range).
  Status RestoreChunkTable(int64_t id, size_t table,
                           const ChunkLocations& locations,
                           const StoredChunks& chunks,
                           const std::string& replaced);
  // RestoreChunkTable's table file, at `staged`: its chunks, small ones read
  // from the first of `sources` that holds them whole.
  Status WriteRestoredTable(int64_t id, const ChunkLocations& locations,
                            const StoredChunks& chunks,
                            std::vector<std::string> sources,
                            const std::string& staged);
  // Reads the small chunk `stored` of checkpoint `id` at `offset` of the
  // first of `*sources` where it checks (moved to the front), into `bytes`.
  bool ReadSmallChunk(int64_t id, const StoredChunk& stored, uint64_t offset,
                      std::vector<std::string>* sources, ChunkBuffer* bytes);
  // Check's lines for what CompareCopies found.
  void ReportCopies(const CopyFindings& found, StoreReport* report);
  // RocksDB's OPTIONS files that do not parse, as repairable metadata (a
  // read-write open writes a new one; the database does not read them).
  void ReportOptionsFiles(StoreReport* report);
  // The database's options files that do not parse or whose bytes differ
  // from their recorded checksum (kOptionsFilesKey), each with why, and
  // whether any options file is there (RocksDB writes one at each open and
  // keeps the newest two; the database reads none of them).
  struct OptionsFiles {
    std::vector<std::pair<std::string, std::string>> damaged;  // path, why
    // Entries under RocksDB's name that are not regular files, each with
    // its kind (NotARegularFile): not removed, only reported.
    std::vector<std::pair<std::string, std::string>> not_files;
    // The files that parse and match any checksum recorded, by name, with
    // the checksum of their bytes; and the checksums recorded.
    std::map<std::string, uint64_t> intact, recorded;
    bool any = false;
  };
  OptionsFiles CheckOptionsFiles();
  // A read-write open, once RocksDB wrote a new options file: removes the
  // damaged ones (one left would be reported again until two more opens
  // rotated it out) and records the checksums of the others.
  void KeepOptionsFiles();
  Status RewriteMetaFamily();
  // Read-write open of a store whose database RocksDB cannot open (damaged
  // CURRENT, MANIFEST or write-ahead log): when every checkpoint the journal
  // names committed has an intact record copy, the database description is
  // rebuilt from the chunk table files and the copies (RebuildFromCopies);
  // the damaged files are kept under damaged/. Otherwise `error` stands.
  Status PreCheckOrRebuild(bool has_db);
  // PrepareDirectory, rebuilding the database (read-write) when its
  // CURRENT file is gone but the copies can rebuild it.
  Result<bool> PrepareOrRebuild();
  // Ingests the chunk table files a rebuild set aside for it (staging/
  // rebuild-*: also those of a rebuild cut short); one whose blocks fail or
  // that cannot be ingested goes to `aside`.
  Status IngestRebuildTables(const std::string& aside);
  // Whether the copies can rebuild the database: a valid journal, and an
  // intact record copy of every checkpoint it names committed.
  bool CanRebuild();
  // The checkpoints the journal names committed without an intact record
  // copy (those that keep CanRebuild false); nullopt without a journal.
  std::optional<std::vector<int64_t>> CommittedWithoutCopies();
  // Writes the record copies of checkpoints `ids` whose records the database
  // (opened read-only, then closed) reads whole; best effort.
  void CopyReadableRecords(bool has_db, const std::vector<int64_t>& ids);
  // Corruption when the `meta` column family reads without error but lacks
  // the record of a checkpoint the journal names committed: RocksDB lost an
  // edit (a cut or replaced MANIFEST), and with it maybe the table files the
  // edit added, which a rebuild takes back.
  Status CheckRocksHoldsJournal();
  Status RebuildFromCopies();
  // The rebuilt `meta` column family: the records of every checkpoint the
  // journal names committed, and of any committed after its high-water mark,
  // from their copies.
  Status RestoreRecordsFromCopies(const CommitJournal& journal,
                                  const std::string& what);
  // Adds the next checkpoint id and the store marker to a rewrite of the
  // `meta` column family.
  void PutStoreHeader(rocksdb::WriteBatch* batch, int64_t next_id);
  // A read-only open's error `s`, saying when a read-write open can rebuild
  // the database.
  Status WithRebuildHint(Status s);
  // CanRebuild, and nothing in the directory that a rebuild would refuse.
  bool CanRebuildInPlace();
  // OpenDb's steps on the store's own database (closed again on failure).
  Status OpenStoreDb();

  // A read-only handle whose store's database description cannot be read
  // reads through a view (store_view.cc): a database of its own in a private
  // temporary directory, rebuilt from the chunk table files and the copies
  // of the records as a read-write open rebuilds the store's.
  //
  // A read-only open's fallback on the error `why` of opening the store's
  // database: a view when `why` is Corruption and CanRebuildInPlace; else
  // `why`, saying what a read-write open can rebuild.
  Status OpenView(const Status& why);
  // Corruption when a rebuild of the store's database was cut short (chunk
  // table files still staged for it): the database in the directory then
  // lacks those tables and maybe the records, so a read-only open reads
  // through a view, which takes them where they are staged.
  Status InterruptedRebuild();
  // The chunk table files a view ingests: the directory's table files and
  // those staged by a rebuild cut short, each file once.
  Result<std::vector<std::string>> ChunkTablesForView();
  // Ingests every chunk table file of the store into the view through a
  // symbolic link (nothing of the store is copied or written); one whose
  // blocks fail or that cannot be ingested is left out and listed in
  // view_unread_tables_.
  Status LinkChunkTablesIntoView();
  // Removes the view's directory (its database closed), where this process
  // made it; forgets the view.
  void RemoveView();
  // The view's damage, for CheckStore.
  void ReportView(StoreReport* report) const;
  // Where RocksDB's database is: the store's directory, or the view's.
  const std::string& DbDir() const;
  // ReadMetadata from the `meta` column family alone.
  Result<CheckpointMetadata> ReadRocksMetadata(
      int64_t checkpoint_id, const std::vector<std::string_view>* tensor_keys);

  const std::string path_;
  const std::string spelled_;
  const StoreOptions options_;
  // Held by a read-write handle from before its open until it is destroyed.
  std::unique_ptr<WriterClaim> claim_;
  // Made anew by each OpenDb; the Env over it outlives the database.
  std::shared_ptr<StoreFileSystem> fs_;
  std::shared_ptr<rocksdb::Env> env_;
  // The journal, and the decisions over the listing of checkpoints.
  CheckpointCatalogue catalogue_{path_};
  std::shared_mutex mu_;  // exclusive for Refresh, shared for everything else
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::ColumnFamilyHandle* chunks_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::string stamp_;  // VersionStamp() when a read-only handle was opened
  // The view's directory (empty when the handle reads the store's own
  // database), the process that made it, why the store's database did not
  // open, and the chunk table files the view does not read.
  std::string view_dir_;
  pid_t view_owner_ = 0;
  std::string view_damage_;
  std::vector<std::string> view_unread_tables_;
  // Table files of 0 bytes the view left out (they hold nothing).
  std::vector<std::string> view_empty_tables_;
  // Buffers of chunk reads, RocksDB's and direct ones.
  const std::shared_ptr<BufferPool> pool_ =
      std::make_shared<BufferPool>(size_t{256} << 20);
  // Made by each OpenRocks, over its database.
  std::unique_ptr<ChunkFileReader> files_;
  // The infos, record ids and decoded record this handle has read; CloseDb
  // (every reopen) and the rewrite from the copies forget them all, a delete
  // its own checkpoint's.
  RecordMemo memo_;
  std::atomic<uint64_t> record_walks_{0};
  // Held checkpoints whose value files CheckHeldValueFiles found whole.
  std::mutex held_mu_;
  std::set<int64_t> held_values_checked_;
  // Compresses the copies of each commit in memory kept between commits.
  CopyEncoder copy_encoder_;
  // The `meta` column family's block cache, kept across reopens.
  const std::shared_ptr<rocksdb::Cache> meta_cache_ = NewMetaBlockCache();
  // FitMetaCache's: the most bytes of records one commit of this handle
  // wrote.
  std::mutex meta_cache_mu_;
  size_t largest_records_ = 0;
  // The table files PrepareDirectory found in the store's directory, for the
  // open that follows (FileOpeningThreads).
  size_t table_files_ = 0;
  // The files of deletes with FileRemoval::kInBackground.
  FileRemover remover_;
  // A delete used the reserve and left its space to remover_: the next
  // NextCheckpointId writes the reserve again once that space is back.
  std::atomic<bool> reserve_released_{false};
};

template <typename Happened>
Status StoreImpl::Reopen(Status error,
                         std::shared_lock<std::shared_mutex>& lock,
                         const std::string& what, Happened&& happened) {
  const Status reopened = ReopenNow(lock);
  if (!reopened.ok()) {
    return Status(error.code(), error.message() +
                                    "; reopening the store to learn the "
                                    "outcome failed too (" +
                                    reopened.ToString() + "), so " + what +
                                    " may have taken effect");
  }
  return happened() ? Status::OK() : error;
}

template <typename Fn>
Status StoreImpl::ForEachRecord(Fn&& fn) {
  record_walks_.fetch_add(1);
  std::set<int64_t> seen;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions(), meta_));
  it->SeekToFirst();
  while (it->Valid()) {
    const std::string_view key(it->key().data(), it->key().size());
    int64_t id = 0;
    std::string_view tensor_key;
    if (DecodeMetaKey(key, &id)) {
      seen.insert(id);
      if (!fn(id, std::string_view(it->value().data(), it->value().size())))
        return Status::OK();
    } else if (!DecodeTensorRecordKey(key, &id, &tensor_key) &&
               !DecodeSmallTensorsKey(key, &id)) {
      break;  // the special keys, after every checkpoint's records
    }
    // The rest of the checkpoint's records hold chunks: not checkpoints.
    it->Seek(MetaRangeEnd(id));
  }
  // Records the scan could not read come from their copies.
  return ForEachCopiedRecord(
      seen, FromRocks(it->status(), "listing checkpoints of '" + path_ + "'"),
      [&](int64_t id, std::string_view record) { return fn(id, record); });
}

}  // namespace ckptdb::storage
