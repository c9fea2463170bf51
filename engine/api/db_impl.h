#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <type_traits>

#include "ckptdb/db.h"
#include "engine/collectives/agreement.h"
#include "engine/collectives/wire.h"
#include "engine/device/device_seams.h"
#include "engine/load/load_executor.h"
#include "engine/save/save_incremental.h"
#include "engine/save/save_record.h"
#include "engine/save/snapshot_memory.h"
#include "engine/save/staged_writes.h"
#include "planner/incremental.h"
#include "planner/load_plan.h"
#include "storage/store.h"

namespace ckptdb::engine {

struct PreparedSave;
class AsyncSave;
class SnapshotRing;

// DB::Open with the device copier and transports given: DB::Open gives
// BuiltDeviceSeams(), tests give host stand-ins.
Result<std::unique_ptr<DB>> OpenDB(const Options& options,
                                   const std::string& path,
                                   std::shared_ptr<Communicator> comm,
                                   DeviceSeams devices);

// The DB over one Store handle per rank: rank 0 read-write (unless opened
// read-only), the others read-only. Collective steps exchange statuses so that
// every rank returns the same result. Device memory is reached through
// `devices` only.
class DBImpl : public DB {
 public:
  DBImpl(Options options, std::string path, std::shared_ptr<Communicator> comm,
         std::unique_ptr<storage::Store> store, DeviceSeams devices);
  ~DBImpl() override;

  Result<CheckpointInfo> Save(const StateDict& state,
                              const SaveOptions& options) override;
  Result<std::shared_ptr<PendingSave>> SaveAsync(
      const StateDict& state, const SaveOptions& options) override;
  // Rank 0: the checkpoints an incremental save compares its chunks with (the
  // newest Options::incremental_depth committed ones whose bytes are all
  // there), newest first; none with Options::incremental off.
  Result<std::vector<int64_t>> IncrementalBases();
  Result<LoadResult> Load(StateDict& state, const CheckpointSelector& which,
                          const LoadOptions& options) override;
  Result<std::vector<CheckpointInfo>> ListCheckpoints() override;
  Result<CheckpointMetadata> GetMetadata(
      const CheckpointSelector& which) override;
  using DB::Read;
  Result<Tensor> Read(const std::string& flat_key,
                      const CheckpointSelector& which, const TensorIndex& index,
                      ReadStats* stats) override;
  Status Delete(const CheckpointSelector& which) override;
  using DB::Verify;
  Result<VerifyReport> Verify(const CheckpointSelector& which,
                              const VerifyOptions& options) override;
  Result<StoreCheckReport> CheckStore() override;
  Status Close() override;
  const Communicator& communicator() const override { return *comm_; }

  int io_threads() const;
  // Options::load_buffer_bytes, or the default for a load of `state_bytes`
  // into this rank's targets.
  uint64_t load_buffer_bytes(uint64_t state_bytes) const;

 private:
  Status CheckOpen() const;
  // Save's steps: validation and planning (collective), then writing and the
  // commit, from the caller's tensors or from `snapshot`. With
  // `whole_plan_on_root`, rank 0 plans every rank's chunks at once
  // (PreparedSave::whole_plan); FinishSave's commit then takes that plan.
  // `call` names the call in the ranks' agreement ("save", "save_async"),
  // and `local` is this rank's own reason to fail it, agreed with the rest.
  Result<PreparedSave> PrepareSave(const StateDict& state,
                                   const SaveOptions& options,
                                   bool whole_plan_on_root,
                                   std::string_view call, Status local);
  Result<CheckpointInfo> FinishSave(PreparedSave& p, SnapshotRing* snapshot);
  // FinishSave's steps: this rank's chunks into staged files (their
  // checksums and the files), then every rank's report to rank 0, which
  // commits, and its outcome back to every rank.
  Status WriteMyChunks(const PreparedSave& p, SnapshotRing* snapshot,
                       std::vector<WrittenChunk>* checksums,
                       std::vector<std::string>* files);
  Result<SaveOutcome> CommitOnEveryRank(
      PreparedSave& p, const Status& written,
      const std::vector<std::string>& files,
      const std::vector<WrittenChunk>& checksums);
  void TakeSnapshot(const PreparedSave& p, SnapshotRing& ring);
  void CopyFromTheBack(const PreparedSave& p, SnapshotRing& snapshot);
  // Waits for the pending asynchronous save, if any (its handle keeps the
  // outcome). Returns its failure when no wait() reported it
  // (AsyncSave::Unreported): the collective call that waited returns that
  // instead of doing its own work, on every rank alike (each rank's save
  // has the same outcome), and only once.
  Status WaitPending();
  // The collective calls, under collective_mu_ once the pending save is done.
  Result<CheckpointInfo> SaveNow(const StateDict& state,
                                 const SaveOptions& options);
  Result<std::shared_ptr<PendingSave>> SaveAsyncNow(const StateDict& state,
                                                    const SaveOptions& options);
  // `resolved`: set to the checkpoint id the load reads once the ranks agree
  // on it.
  Result<LoadResult> LoadNow(StateDict& state, const CheckpointSelector& which,
                             const LoadOptions& options, int64_t* resolved);
  Status DeleteNow(const CheckpointSelector& which);
  // `outcome`, noting in peer_closing_ when it says another rank was closing
  // the store (IsPeerClosing).
  template <typename R>
  R NotingPeerClosing(R outcome) {
    if constexpr (std::is_same_v<R, Status>) {
      if (IsPeerClosing(outcome)) peer_closing_ = true;
    } else {
      if (!outcome.ok() && IsPeerClosing(outcome.status()))
        peer_closing_ = true;
    }
    return outcome;
  }
  // After a collective call deleted checkpoints: the other ranks re-open
  // their read-only handles, closing the deleted files they held.
  void LetGoOfDeletedFiles();
  // Rank 0 resolves the selector; every rank gets the id (or the same error)
  // and its metadata, refreshing a read-only handle when the checkpoint is
  // newer than it. Fails alike on every rank when the ranks' `args` differ.
  // With `tensor_keys`, only those tensors come with their chunks
  // (Store::GetMetadata(id, keys)).
  // `resolved`, when given, is set to the id once the ranks agree on it.
  Result<CheckpointMetadata> ResolveCollective(
      const CheckpointSelector& which, const CallArguments& args,
      const std::vector<std::string_view>* tensor_keys = nullptr,
      int64_t* resolved = nullptr);
  // Local: resolves against this rank's handle, refreshing it once when nothing
  // matches.
  Result<CheckpointMetadata> ResolveLocal(const CheckpointSelector& which);

  // The device index this rank's transport would use for a load into `views`
  // (its first device target's, else the current device), or -1 when it has
  // no device.
  int TransportDevice(const std::vector<TensorView*>& views) const;
  // The transport over `devices` (every rank's TransportDevice), created on
  // first use. nullptr, on every rank alike, when some rank has no device or
  // creating it failed somewhere. Collective.
  Result<DeviceTransport*> TransportFor(const std::vector<int>& devices);

  const Options options_;
  const std::string path_;
  std::shared_ptr<Communicator> comm_;
  std::unique_ptr<storage::Store> store_;
  const DeviceSeams devices_;
  // Declared after comm_: destroyed before it.
  std::unique_ptr<DeviceTransport> transport_;
  std::vector<int> transport_devices_;
  Status transport_failure_;  // why this DB has none, once creating one failed
  // The snapshot memory of asynchronous saves (reused; prepared at open when
  // Options::snapshot_bytes is set), and the save under way. The save uses
  // the memory: declared after it, it goes first.
  SnapshotMemory snapshot_memory_;
  // The staging memory of loads, kept for the next load (released at close).
  LoadScratch load_scratch_;
  std::shared_ptr<AsyncSave> pending_;
  // Incremental saves: the chunks of this handle's last commits (at most
  // Options::incremental_depth, newest first), which the next saves compare
  // with while they are among the store's newest checkpoints. Rank 0 keeps
  // whole records; the other ranks their own chunks (OwnChunks in
  // save_incremental.h).
  KeptCommits kept_commits_;
  // The stored chunks this handle read and found intact before it shared
  // them lately, of the holders its last save shared chunks of.
  CheckedChunks checked_chunks_;
  // Held through each collective call (Save, SaveAsync, Load, Delete,
  // Close): calls from several threads of the process run one after
  // another. Two saves at once took the same checkpoint id, and both
  // returned while one overwrote the other's chunks.
  std::mutex collective_mu_;
  // Held shared by the local calls (ListCheckpoints, GetMetadata, Read,
  // Verify, CheckStore), which may run on other threads at any time, and
  // exclusively by Close while it lets go of the store.
  std::shared_mutex open_mu_;
  // A collective call failed because another rank was closing the store:
  // this rank's Close then meets no one (it closes on its own).
  bool peer_closing_ = false;
};

}  // namespace ckptdb::engine
