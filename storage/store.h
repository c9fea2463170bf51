#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckptdb/file_system_hooks.h"
#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "core/checksum.h"

namespace ckptdb::storage {

// A place for `size` bytes of a chunk.
struct ChunkPiece {
  char* data = nullptr;
  size_t size = 0;
};

// One chunk of Store::ReadChunksScattered: its bytes go to `pieces`, in
// order (their sizes add up to chunk->nbytes). The pieces (and the key) are
// the caller's and must stay valid until the call returns: a load of many
// chunks keeps all of them in one vector.
struct ChunkToRead {
  std::string_view tensor_key;
  const ChunkMetadata* chunk = nullptr;
  std::span<const ChunkPiece> pieces;
};

struct StoreOptions {
  // Called before every file operation of the store
  // (Options::file_system_hooks); nullptr: none.
  std::shared_ptr<FileSystemHooks> file_system_hooks{};
  bool create_if_missing = true;
  // Never modifies the directory: no lock, no log files, no cleanup.
  bool read_only = false;
  // fsync the store's own files (journal, markers) and directories.
  bool sync = true;
  // Testing hook: false writes chunks of any size into table files, as stores
  // of format 2 hold them (large chunks start a data block of their own),
  // instead of large ones into value files.
  bool value_files = true;
};

// The bytes of one chunk read from a store, pinned without a copy where
// possible. Empty until a read fills it (a load keeps one a read, most of
// which read straight into their targets and never fill theirs).
class ChunkBuffer {
 public:
  ChunkBuffer();
  ChunkBuffer(ChunkBuffer&&) noexcept;
  ChunkBuffer& operator=(ChunkBuffer&&) noexcept;
  ~ChunkBuffer();
  std::string_view bytes() const;
  // Read straight from its table file rather than through RocksDB.
  bool read_directly() const;

 private:
  friend class StoreImpl;
  friend class ChunkFileReader;
  struct Impl;
  // The state a read fills, made on first use.
  Impl& impl();
  std::unique_ptr<Impl> impl_;
};

// A chunk one rank writes: its tensor's flat key and its box's origin.
struct ChunkToWrite {
  std::string_view tensor_key;
  const Shape* origin = nullptr;
};

// The order in which one writer's chunks `chunks` of one checkpoint must be
// added to a StagedFileWriter: indexes into `chunks`, by storage key
// (EncodeChunkKey), found without encoding the keys.
std::vector<size_t> ChunkWriteOrder(std::span<const ChunkToWrite> chunks);

// Writes one writer rank's chunks of one checkpoint into a staged SST file
// inside the store directory, for Store::Commit to ingest. Chunks must be added
// in increasing EncodeChunkKey order (ChunkWriteOrder). Usable by any rank,
// read-only handle or not. Not thread-safe.
class StagedFileWriter {
 public:
  virtual ~StagedFileWriter() = default;
  // Adds a chunk; returns its checksum: `checksum` when the caller has
  // computed it (ChunkChecksum of `bytes`), else computed here.
  virtual Result<uint64_t> Add(std::string_view tensor_key,
                               const Shape& global_offset,
                               std::string_view bytes,
                               std::optional<uint64_t> checksum) = 0;
  Result<uint64_t> Add(std::string_view tensor_key, const Shape& global_offset,
                       std::string_view bytes) {
    return Add(tensor_key, global_offset, bytes, std::nullopt);
  }
  // What AddUnlessUnchanged did with a chunk: its checksum and content hash,
  // and whether it was added.
  struct Added {
    ChunkDigest digest;
    bool added = false;
  };
  // Adds a chunk unless `unchanged` says its content hash is that of a stored
  // chunk it equals, hashing it as it is written: one pass over the bytes.
  // An unchanged chunk leaves nothing behind (its bytes, written, are taken
  // back); the caller refers to the stored chunk instead.
  virtual Result<Added> AddUnlessUnchanged(
      std::string_view tensor_key, const Shape& global_offset,
      std::string_view bytes,
      const std::function<bool(const ContentHash&)>& unchanged) = 0;
  // Finishes (and syncs) the file; returns its path, or "" when no chunk was
  // added (the file is removed then).
  virtual Result<std::string> Finish() = 0;
  // Removes the file; called on failure.
  virtual void Abandon() = 0;
};

// Directory where staged files live (cleared by a read-write open).
std::string StagingDir(const std::string& store_path);
// In the staging directory: a second name of a deleted checkpoint's chunk
// table file, until a background removal frees it (FileRemoval).
inline constexpr char kDeletedTablePrefix[] = "deleted-";

// What Store::Check finds beyond single checkpoints.
struct StoreReport {
  // Checkpoint ids with chunk data but no record, kept because they may have
  // been committed (chunks of ids that provably never were are removed at a
  // read-write open).
  std::vector<int64_t> unaccounted_chunk_ids;
  // Checkpoint ids with value files but no chunks: nothing can reach them (a
  // save or a deletion was interrupted); a read-write open removes them.
  std::vector<int64_t> unused_value_ids;
  // Value files in the directory of a checkpoint that has chunks, which none
  // of its table files points into (a writer of an earlier, failed attempt at
  // that id left them): unreachable space, by path.
  std::vector<std::string> stray_value_files;
  // No checkpoint above it ever committed: chunks of higher ids are leftovers
  // of interrupted saves, which a read-write open removes.
  int64_t high_water = 0;
  // Commit journal copies that are damaged or missing, with why.
  std::vector<std::string> damaged_journal_copies;
  // Metadata damaged in one of its two copies (record_copies.h), one line
  // each naming the checkpoint and the file: reads use the intact copy, and a
  // read-write open rewrites the damaged one.
  std::vector<std::string> repairable_metadata;
  // Metadata damaged in both copies: the checkpoint's records are lost.
  std::vector<std::string> lost_metadata;
  // Chunk table files whose bytes differ from those they were written with
  // outside their blocks (a footer's padding), one line each naming the
  // file: no chunk is affected.
  std::vector<std::string> damaged_chunk_tables;
  // Entries where the store keeps its directories (staging, values,
  // values/<id>) that are not directories (symbolic links, FIFOs...): not
  // ckptdb's, so no open removes them. "PATH is a symbolic link".
  std::vector<std::string> foreign_entries;
  // Whether a read-write handle (of this process or another) holds the store
  // while it is checked: chunks above high_water and stray value files may
  // then be a save under way rather than leftovers.
  bool writer_active = false;
};

// When a delete frees the space of the chunks it drops (their value and table
// files).
enum class FileRemoval {
  kBeforeReturning,
  // On a thread of the store, after Delete returns (FileRemover). The
  // checkpoint is gone either way; its space comes back a little later. The
  // handle's next NextCheckpointId (a save's start, before anything is
  // written), Delete and Check, and its close, wait for it first.
  kInBackground,
};

// One RocksDB database with column families `chunks` (tensor bytes, or for
// chunks of kExternalValueBytes or more pointers into value files:
// value_files.h) and `meta` (per checkpoint a main Cap'n Proto record, the
// commit point, and one record per tensor holding its chunks; storage/keys.h).
// Thread-safe for concurrent reads.
class Store {
 public:
  // Opens the store at `path`. A read-write open takes RocksDB's lock, removes
  // the leftovers of interrupted saves (staged files, chunks without a metadata
  // record) and creates the store when absent and asked to. A directory that
  // holds something else is InvalidArgument.
  static Result<std::unique_ptr<Store>> Open(const std::string& path,
                                             const StoreOptions& options);
  virtual ~Store() = default;

  virtual const std::string& path() const = 0;
  virtual bool read_only() const = 0;
  // What tells this store from every other: the database's identity, made
  // when the store was created (a copy of the store's directory has its
  // original's). Ranks that open one store through other paths (links,
  // mounts) find the same identity.
  virtual Result<std::string> Identity() = 0;

  // Committed checkpoints, oldest first.
  virtual Result<std::vector<CheckpointInfo>> List() = 0;
  // NotFound naming the selector when none matches.
  virtual Result<int64_t> Resolve(const CheckpointSelector& which) = 0;
  // The whole checkpoint: its main record and every tensor's record.
  // Corruption naming the checkpoint id (and the tensor) when a record is
  // missing or damaged.
  virtual Result<CheckpointMetadata> GetMetadata(int64_t checkpoint_id) = 0;
  // What a load needs: every tensor of the checkpoint comes back with its
  // dtype and global shape, but only the tensors named in `tensor_keys` have
  // their chunks; the others come back WITHOUT chunks. Reads and decodes only
  // the main record and the named tensors' records (of a format-1 checkpoint,
  // the one record, with the other tensors' chunks dropped). Keys that name no
  // tensor of the checkpoint are ignored: the caller reports them. The paths
  // are not read: flat_mapping and path_kinds come back empty (the keys are
  // those of tensors and values).
  virtual Result<CheckpointMetadata> GetMetadata(
      int64_t checkpoint_id,
      const std::vector<std::string_view>& tensor_keys) = 0;
  // What a read of tensor `key` needs: the checkpoint's info, the tensor with
  // its chunks when `key` names one, the small value when it names one, and
  // nothing else. The checkpoint's main record (and its small tensors'
  // record) is decoded once for a series of such reads, which then cost a
  // lookup each rather than a decode of every tensor's entry. Errors as
  // GetMetadata's.
  virtual Result<CheckpointMetadata> GetTensorMetadata(
      int64_t checkpoint_id, std::string_view key) = 0;

  // The id the next commit will get. Read-write only. Called before a save
  // stages anything: it also removes the value files that no table file
  // reaches (those of a failed save, kept in case it committed after all).
  virtual Result<int64_t> NextCheckpointId() = 0;
  // InvalidArgument when `tag` names a committed checkpoint.
  virtual Status CheckTagFree(const std::string& tag) = 0;
  // Whether a new checkpoint may share the chunks of checkpoint
  // `checkpoint_id` (an incremental save's base): Corruption naming the file
  // when a value file of it, or of a checkpoint whose chunks it shares, is
  // missing or cut short, or when their chunk table files are gone (set aside
  // by a rebuild). Read-write only.
  virtual Status CheckShareable(int64_t checkpoint_id) = 0;

  // Ingests the staged files (which must hold only chunks of meta.info.id) and
  // writes the metadata record: the commit point. Returns OK only once the
  // record is in a synced table file and the commit journal names it. On
  // failure the store is reopened to learn what reached the disk: OK when the
  // checkpoint turns out committed; otherwise nothing of it stays in the
  // database (its staged files are the caller's to remove, RemoveStaged); an
  // error that cannot tell says the checkpoint may be committed. Read-write
  // only.
  virtual Status Commit(const CheckpointMetadata& meta,
                        const std::vector<std::string>& staged_files) = 0;

  // Reads one chunk and verifies its size and checksum (Corruption naming the
  // key and offset).
  virtual Result<ChunkBuffer> ReadChunk(int64_t checkpoint_id,
                                        std::string_view tensor_key,
                                        const ChunkMetadata& chunk) = 0;
  // Like ReadChunk, into `dst` (chunk.nbytes bytes): a chunk in a value file,
  // or one that starts a data block of its table file, is read straight from
  // the file, with no intermediate buffer. `dst` may be partly written on
  // error.
  virtual Status ReadChunkInto(int64_t checkpoint_id,
                               std::string_view tensor_key,
                               const ChunkMetadata& chunk, void* dst) = 0;
  // Like ReadChunkInto, into `pieces` in order (their sizes add up to
  // chunk.nbytes): the chunk's bytes go straight to the places they are
  // needed, and the checksum is taken over the pieces. Pieces may be partly
  // written on error.
  virtual Status ReadChunkScattered(int64_t checkpoint_id,
                                    std::string_view tensor_key,
                                    const ChunkMetadata& chunk,
                                    const std::vector<ChunkPiece>& pieces) = 0;
  // ReadChunkScattered for each of `reads`, chunks of checkpoint
  // `checkpoint_id`: chunks read straight from the files, those lying near
  // each other in one file with one system call (a state of many small
  // tensors has many small chunks side by side). Stops at the first chunk
  // that fails, with its error.
  virtual Status ReadChunksScattered(int64_t checkpoint_id,
                                     const std::vector<ChunkToRead>& reads) = 0;
  // Reads one chunk through RocksDB with its block checksums verified (for a
  // chunk in a value file, its pointer; then the bytes from the value file),
  // then checks the chunk's own checksum: what DB::Verify runs, so that damage
  // to a table file outside chunk values (which direct reads never touch) is
  // found too.
  // When the chunk's bytes are intact but its table file is damaged around
  // them (its pointer, index or footer), they read back through the copy of
  // the chunk's location (record_copies.h): then Corruption saying so, or,
  // with `through_copy`, OK and *through_copy saying what is damaged.
  virtual Status VerifyChunk(int64_t checkpoint_id, std::string_view tensor_key,
                             const ChunkMetadata& chunk,
                             std::string* through_copy) = 0;
  Status VerifyChunk(int64_t checkpoint_id, std::string_view tensor_key,
                     const ChunkMetadata& chunk) {
    return VerifyChunk(checkpoint_id, tensor_key, chunk, nullptr);
  }

  // Removes a checkpoint: marks it deleting in the journal, removes its
  // record, then its chunks, reclaiming their files' space when `removal`
  // says. Interrupted, the next read-write open finishes it.
  virtual Status Delete(int64_t checkpoint_id, FileRemoval removal) = 0;
  Status Delete(int64_t checkpoint_id) {
    return Delete(checkpoint_id, FileRemoval::kBeforeReturning);
  }

  // Read-only handles see the store as of their open; Refresh re-opens one to
  // see later commits. A no-op for a read-write handle, or when the writer has
  // changed nothing since.
  virtual Status Refresh() = 0;
  // Closes a read-only handle's view, letting go of every table and value
  // file it holds open (a deleted checkpoint's space comes back only once no
  // handle holds its files); the next call that reads the store opens it
  // again. Staged writes do not need it open. A no-op for a read-write
  // handle.
  virtual void Release() = 0;

  // A writer for one writer rank's chunks of one checkpoint; `part`
  // distinguishes several files of one rank (each covering its own key
  // range). Usable on read-only handles.
  virtual Result<std::unique_ptr<StagedFileWriter>> NewStagedFile(
      int64_t checkpoint_id, int32_t rank, int part) = 0;

  // Removes staged files of a save that will not be committed.
  virtual void RemoveStaged(const std::vector<std::string>& staged_files) = 0;

  // The store as a whole: chunk data no record accounts for, damaged journal
  // copies.
  virtual Result<StoreReport> Check() = 0;
};

}  // namespace ckptdb::storage
