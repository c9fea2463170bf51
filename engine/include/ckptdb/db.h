#pragma once

// Start here: the database of sharded checkpoints.
//
//   ASSIGN_OR_RETURN(auto db, ckptdb::DB::Open(ckptdb::Options(),
//   "/ckpt/store")); ckptdb::StateDict sd; sd.Child("model").Set("w",
//   ckptdb::TensorView::Whole(w.data(), ckptdb::DType::kFloat32, {4, 8}));
//   ASSIGN_OR_RETURN(auto info, db->Save(sd, {.step = 100}));
//   ASSIGN_OR_RETURN(auto result, db->Load(sd,
//   ckptdb::CheckpointSelector::Latest(), {}));

#include <memory>
#include <string>
#include <vector>

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

// An owned whole tensor returned by DB::Read.
struct Tensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<std::byte> data;  // C-contiguous
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
// ListCheckpoints, GetMetadata, Read and Verify are local.
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

  // The whole tensor stored under `flat_key`, assembled from its chunks.
  virtual Result<Tensor> Read(const std::string& flat_key,
                              const CheckpointSelector& which) = 0;

  // Removes a checkpoint and reclaims its space.
  virtual Status Delete(const CheckpointSelector& which) = 0;

  // Verifies the checksum of every chunk of a checkpoint; Corruption names each
  // damaged one.
  virtual Status Verify(const CheckpointSelector& which) = 0;

  // Releases the store. Further calls fail with FailedPrecondition.
  virtual Status Close() = 0;

  virtual const Communicator& communicator() const = 0;
};

}  // namespace ckptdb
