#pragma once

// Start here: the database of sharded checkpoints.
//
// clang-format off
//   auto db = ckptdb::DB::Open(ckptdb::Options(), "/ckpt/store");   // Result<std::unique_ptr<DB>>
//   if (!db.ok()) return db.status();
//
//   ckptdb::StateDict state;                                         // this rank's shards
//   state.Child("model").Set(
//       "w", ckptdb::TensorView::Whole(w.data(), ckptdb::DType::kFloat32, {4, 8}));
//   auto saved = (*db)->Save(state, {.step = 100});                  // collective
//
//   auto loaded = (*db)->Load(state, ckptdb::CheckpointSelector::Latest(), {});
// clang-format on
//
// DB (below) is the store and its calls; Options, SaveOptions and LoadOptions
// are in ckptdb/options.h, StateDict and TensorView in ckptdb/types.h, the
// result types in ckptdb/results.h. Errors are Status values
// (ckptdb/status.h), never exceptions.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckptdb/box.h"
#include "ckptdb/communicator.h"
#include "ckptdb/metadata.h"
#include "ckptdb/options.h"
#include "ckptdb/results.h"
#include "ckptdb/status.h"
#include "ckptdb/types.h"

namespace ckptdb {

// The library's version, "major.minor.patch".
const char* Version();

// A store of checkpoints. Non-copyable. Save, Load, Delete and Close are
// collective over the communicator given to Open: every rank calls them in the
// same order with the same arguments, and every rank gets the same result.
// Ranks that pass a different step, tag or user metadata (Save), selector,
// strict or cast (Load) or selector (Delete) all get InvalidArgument naming the
// argument and the ranks, before anything is written.
// ListCheckpoints, GetMetadata, Read, Verify and CheckStore are local.
// Thread-safety: calls on one handle from several threads run one after
// another (each collective call waits for the one before, as in api.md);
// local calls may run on other threads at any time.
// A handle (and a PendingSave from it) belongs to the process that opened it:
// in a child of fork() every call fails with FailedPrecondition naming the
// fork and touches nothing, and destroying it there leaves the parent's
// resources alone. Open the store again in the child instead.
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
  // destruction first wait for a pending save; when it failed and no Wait()
  // returned its failure, that call returns it (prefixed "the asynchronous
  // save of step N failed, and no wait() had reported it") instead of doing
  // its own work, once (Close closes first; the destructor prints it to
  // stderr). A crash at any moment leaves earlier checkpoints whole and never
  // a partial one.
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
  // each checksum-verified; slice bounds beyond the tensor are clamped to
  // it, as numpy clamps them. `stats`, when given, receives what was read.
  // NotFound naming the key when the checkpoint has no such tensor;
  // InvalidArgument naming the key, the tensor's shape and the index for a
  // bad index (a single position out of range, a step other than 1, too many
  // entries).
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

  // Releases the store. Further calls fail with FailedPrecondition; Close
  // itself may be called again and returns OK.
  virtual Status Close() = 0;

  virtual const Communicator& communicator() const = 0;
};

}  // namespace ckptdb
