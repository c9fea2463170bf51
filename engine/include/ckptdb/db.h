#pragma once

// Start here: the database of sharded checkpoints.
//
//   ASSIGN_OR_RETURN(auto db, ckptdb::DB::Open(ckptdb::Options(),
//   "/ckpt/store")); ckptdb::StateDict sd; sd.Child("model").Set("w",
//   ckptdb::TensorView::Whole(w.data(), ckptdb::DType::kFloat32, {4, 8}));
//   ASSIGN_OR_RETURN(auto info, db->Save(sd, {.step = 100}));
//   ASSIGN_OR_RETURN(auto result, db->Load(sd,
//   ckptdb::CheckpointSelector::Latest(), {}));

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/box.h"
#include "ckptdb/communicator.h"
#include "ckptdb/metadata.h"
#include "ckptdb/options.h"
#include "ckptdb/status.h"
#include "ckptdb/types.h"

namespace ckptdb {

// The library's version, "major.minor.patch".
const char* Version();

// Byte counts of one Load on the calling rank.
struct LoadStats {
  uint64_t bytes_read = 0;         // chunk bytes this rank read from storage
  uint64_t bytes_needed = 0;       // bytes this rank's targets received
  uint64_t bytes_sent = 0;         // bytes this rank sent to other ranks
  uint64_t device_bytes_sent = 0;  // of those, sent device to device (NCCL)
  uint64_t chunks_read = 0;
};

struct LoadResult {
  std::vector<std::string>
      missing_keys;  // requested, not in the checkpoint (strict=false)
  std::vector<std::string> unexpected_keys;  // in the checkpoint, not requested
  LoadStats stats;
};

// An owned tensor (or part of one) returned by DB::Read.
struct Tensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  // C-contiguous.
  std::vector<std::byte> data;
};

// Byte counts of one DB::Read.
struct ReadStats {
  // Bytes of the stored chunks read (each chunk meeting the index is read
  // whole and its checksum verified).
  uint64_t bytes_read = 0;
  uint64_t chunks_read = 0;
};

// Per-verify parameters.
struct VerifyOptions {
  // Progress, when set: called after each chunk with the chunk bytes checked
  // so far and the checkpoint's total, one call at a time (from I/O threads).
  std::function<void(uint64_t done, uint64_t total)> on_progress;
};

// What DB::Verify found in one checkpoint.
struct VerifyReport {
  int64_t checkpoint_id = 0;
  // Chunks read and checked, and their bytes.
  uint64_t chunks = 0;
  uint64_t bytes = 0;
  // Chunks unreadable or whose checksum differs.
  uint64_t damaged_chunks = 0;
  // One message per problem, naming the tensor and the chunk (offset): a
  // chunk outside its tensor, a recorded size that does not match its box,
  // chunks that overlap or leave a gap, a chunk unreadable or whose checksum
  // differs. Empty when the checkpoint is intact.
  std::vector<std::string> problems;

  bool ok() const { return problems.empty(); }
};

// What DB::CheckStore found beyond single checkpoints.
struct StoreCheckReport {
  // Checkpoint ids with chunk data but no record that may have been
  // committed: damage (the data is kept, never deleted).
  std::vector<int64_t> unaccounted_chunk_ids;
  // Checkpoint ids with chunk data but no record that were never committed,
  // or with value files that no chunk reaches: a save under way or cut short
  // (or a delete cut short), whose leftovers the next read-write open
  // removes. Not damage.
  std::vector<int64_t> unfinished_save_ids;
  // Value files of a checkpoint that none of its chunks is in (left by a
  // writer of an earlier, failed attempt at that checkpoint id), by path:
  // unreachable space, not damage.
  std::vector<std::string> stray_value_files;
  // Damaged copies of the commit journal (the other copy is in use), by path.
  std::vector<std::string> damaged_journal_copies;

  bool ok() const {
    return unaccounted_chunk_ids.empty() && damaged_journal_copies.empty();
  }
};

// A save running in the background (DB::SaveAsync).
class PendingSave {
 public:
  virtual ~PendingSave() = default;
  // True once the save has finished, committed or failed. Local; never
  // blocks.
  virtual bool Done() const = 0;
  // Waits for the save and returns the committed checkpoint's info or the
  // save's error, the same on every rank. May be called again, from any
  // thread.
  virtual Result<CheckpointInfo> Wait() = 0;
};

// A store of checkpoints. Non-copyable. Save, Load, Delete and Close are
// collective over the communicator given to Open: every rank calls them in the
// same order with the same arguments, and every rank gets the same result.
// Ranks that pass a different step, tag or user metadata (Save), selector,
// strict or cast (Load) or selector (Delete) all get InvalidArgument naming the
// argument and the ranks, before anything is written.
// ListCheckpoints, GetMetadata, Read, Verify and CheckStore are local.
// Thread-safety: collective calls must not overlap one another; local calls may
// run on other threads at any time.
class DB {
 public:
  // Opens (or creates, per options) the store at `path`. Collective. With
  // several ranks, rank 0 holds the store for writing and the others read
  // through read-only handles.
  static Result<std::unique_ptr<DB>> Open(
      const Options& options, const std::string& path,
      std::shared_ptr<Communicator> comm = nullptr);

  DB() = default;
  DB(const DB&) = delete;
  DB& operator=(const DB&) = delete;
  virtual ~DB() = default;

  // Saves `state` (this rank's shards, replicas allowed) as one new checkpoint.
  // Invalid input fails on every rank before any byte is written.
  virtual Result<CheckpointInfo> Save(const StateDict& state,
                                      const SaveOptions& options) = 0;

  // Like Save, returning once every tensor of `state` is copied into host
  // memory (Options::snapshot_bytes bounds it; a larger state makes the call
  // wait until earlier chunks are written): the caller may change its tensors
  // at once. Validation and planning happen before it returns, so invalid
  // input fails here, on every rank. Writing, the commit and retention go on
  // in a background thread that uses the DB's own communicator (for MPI,
  // MPI_THREAD_MULTIPLE; FailedPrecondition otherwise). Every other
  // collective call (Save, SaveAsync, Load, Delete, Close) and the DB's
  // destruction first wait for a pending save. A crash at any moment leaves
  // earlier checkpoints whole and never a partial one.
  virtual Result<std::shared_ptr<PendingSave>> SaveAsync(
      const StateDict& state, const SaveOptions& options) = 0;
  // Fills every tensor of `state` in place from the selected checkpoint,
  // resharding as needed, and replaces small values by the stored ones.
  virtual Result<LoadResult> Load(StateDict& state,
                                  const CheckpointSelector& which,
                                  const LoadOptions& options) = 0;

  // Committed checkpoints, oldest first.
  virtual Result<std::vector<CheckpointInfo>> ListCheckpoints() = 0;

  virtual Result<CheckpointMetadata> GetMetadata(
      const CheckpointSelector& which) = 0;

  // The part `index` selects (numpy's way, ckptdb/box.h) of the tensor
  // stored under `flat_key`, read from only the chunks that hold part of it,
  // each checksum-verified. `stats`, when given, receives what was read.
  // NotFound naming the key when the checkpoint has no such tensor;
  // InvalidArgument naming the key, the tensor's shape and the index for a
  // bad index (out of range, step other than 1, too many entries).
  virtual Result<Tensor> Read(const std::string& flat_key,
                              const CheckpointSelector& which,
                              const TensorIndex& index, ReadStats* stats) = 0;
  // The whole tensor.
  Result<Tensor> Read(const std::string& flat_key,
                      const CheckpointSelector& which) {
    return Read(flat_key, which, TensorIndex{}, nullptr);
  }
  // Exactly `box` of the tensor (dimensions the box lacks are taken whole).
  // InvalidArgument naming the key and the box when it has a negative offset
  // or extent, or does not lie inside the tensor.
  Result<Tensor> Read(const std::string& flat_key,
                      const CheckpointSelector& which, const Box& box,
                      ReadStats* stats = nullptr);

  // Removes a checkpoint and reclaims its space.
  virtual Status Delete(const CheckpointSelector& which) = 0;

  // Reads every chunk of a checkpoint, verifying its checksum, and checks
  // that the chunks partition each tensor. Damage is reported, not failed:
  // the error statuses are those of finding the checkpoint and reading its
  // records (Corruption naming the checkpoint when a record is damaged).
  virtual Result<VerifyReport> Verify(const CheckpointSelector& which,
                                      const VerifyOptions& options) = 0;
  // Like the above; Corruption naming each damaged chunk.
  Status Verify(const CheckpointSelector& which);

  // The store as a whole: chunk data that no checkpoint record accounts for,
  // damaged copies of the commit journal.
  virtual Result<StoreCheckReport> CheckStore() = 0;

  // Releases the store. Further calls fail with FailedPrecondition.
  virtual Status Close() = 0;

  virtual const Communicator& communicator() const = 0;
};

}  // namespace ckptdb
