#include <algorithm>
#include <bit>
#include <cstdio>
#include <string_view>
#include <thread>

#include "core/checksum.h"
#include "engine/api/db_impl.h"
#include "engine/api/process_bound.h"
#include "engine/collectives/sealed_communicator.h"
#include "engine/collectives/wire.h"

namespace ckptdb {

Result<std::unique_ptr<DB>> DB::Open(const Options& options,
                                     const std::string& path,
                                     std::shared_ptr<Communicator> comm) {
  return engine::OpenDB(options, path, std::move(comm),
                        engine::BuiltDeviceSeams());
}

namespace engine {

namespace {

// InvalidArgument naming the first of `options` out of its range.
Status CheckOptions(const Options& options) {
  if (options.invalid_arguments)
    return Status::InvalidArgument(*options.invalid_arguments);
  if (options.max_chunk_bytes == 0 ||
      options.max_chunk_bytes > kMaxChunkBytes) {
    return Status::InvalidArgument("Options::max_chunk_bytes must be in [1, " +
                                   std::to_string(kMaxChunkBytes) + "], got " +
                                   std::to_string(options.max_chunk_bytes));
  }
  for (const auto& [name, value] :
       {std::pair{"keep_last", options.keep_last},
        std::pair{"keep_every_steps", options.keep_every_steps}}) {
    if (value && *value < 1) {
      return Status::InvalidArgument(std::string("Options::") + name +
                                     " must be >= 1 (or unset), got " +
                                     std::to_string(*value));
    }
  }
  if (options.incremental_depth < 1) {
    return Status::InvalidArgument(
        "Options::incremental_depth must be >= 1, got " +
        std::to_string(options.incremental_depth));
  }
  if (options.io_threads < 0 || options.io_threads > kMaxIoThreads) {
    return Status::InvalidArgument(
        "Options::io_threads must be 0 (the hardware threads) to " +
        std::to_string(kMaxIoThreads) + ", got " +
        std::to_string(options.io_threads));
  }
  return Status::OK();
}

// What a rank's open shows of its store: the checkpoints it lists (id, step,
// tag, creation time and bytes), as a digest. Ranks that opened one store
// see the same ones (the others open after rank 0, which alone writes).
Result<std::string> ListingDigest(storage::Store& store) {
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<CheckpointInfo> infos,
                          store.List());
  std::string listed;
  for (const CheckpointInfo& info : infos) {
    listed += std::to_string(info.id) + ' ' +
              (info.step ? std::to_string(*info.step) : "-") + ' ' +
              (info.tag ? "'" + *info.tag + "'" : "-") + ' ' +
              std::to_string(std::bit_cast<uint64_t>(info.created)) + ' ' +
              std::to_string(info.nbytes) + '\n';
  }
  return std::to_string(infos.size()) + " checkpoints, digest " +
         std::to_string(storage::ChunkChecksum(listed.data(), listed.size()));
}

// True when every rank opened one store and lists the same checkpoints; false
// when they list different ones of one store, unless `last` (then the
// error); InvalidArgument naming ranks, paths and identities when they opened
// different stores. Collective.
Result<bool> SameStoreOnEveryRank(Communicator& comm, storage::Store& store,
                                  const std::string& path, bool last) {
  Result<std::string> identity = store.Identity();
  Result<std::string> listing =
      identity.ok() ? ListingDigest(store) : identity.status();
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(comm, listing.status()));
  const char kSep = '\0';
  CKPTDB_ASSIGN_OR_RETURN(
      const std::vector<std::string> all,
      AllGatherAgreed(comm, CallArguments("open"),
                      *identity + kSep + *listing + kSep + path));
  // Each rank's (identity, listing) with the ranks that have it.
  struct Seen {
    std::string_view identity, listing, path;
  };
  std::vector<Seen> by_rank;
  for (const std::string& one : all) {
    const size_t a = one.find(kSep), b = one.find(kSep, a + 1);
    const std::string_view view(one);
    by_rank.push_back(
        {view.substr(0, a), view.substr(a + 1, b - a - 1), view.substr(b + 1)});
  }
  const bool one_identity = std::all_of(
      by_rank.begin(), by_rank.end(),
      [&](const Seen& s) { return s.identity == by_rank[0].identity; });
  std::vector<std::pair<std::string_view, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
    const std::string_view key =
        one_identity ? by_rank[r].listing : by_rank[r].identity;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) it = groups.insert(groups.end(), {key, {}});
    it->second.push_back(r);
  }
  if (groups.size() == 1) return true;
  if (one_identity && !last) return false;
  std::string message =
      one_identity ? "the ranks opened one store (or copies of it) in " +
                         std::to_string(groups.size()) + " different states: "
                   : "the ranks opened " + std::to_string(groups.size()) +
                         " different stores: ";
  constexpr size_t kMaxListed = 4;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i == kMaxListed) {
      message += "; and " + std::to_string(groups.size() - i) + " more";
      break;
    }
    const auto& [key, ranks] = groups[i];
    const Seen& first = by_rank[ranks.front()];
    message +=
        (i > 0 ? "; " : "") + RankList(ranks) + " '" + std::string(first.path) +
        "' (" +
        (one_identity ? std::string(key) : "database " + std::string(key)) +
        ")";
  }
  return Status::InvalidArgument(
      message +
      ". Every rank must open the same store (one directory that every rank "
      "reaches, e.g. on a shared file system, by an absolute path), not "
      "copies of it");
}

// InvalidArgument on every rank unless every rank opened the same store, in
// the same state: ranks given different directories (a relative path under
// different working directories, a path local to each node) would load one
// store's bytes on some ranks and another's on the rest, and write a save's
// chunks where its commit never looks. Told by the stores' identity (a copy
// of a store has its original's) and the checkpoints each rank lists (a copy
// that went its own way lists others), not by paths, so that one store
// reached through different paths (links, mounts) opens. After every rank
// has opened its store. Collective.
Status AgreeOnStore(Communicator& comm, storage::Store& store,
                    const std::string& path) {
  if (comm.size() == 1) return Status::OK();
  // A writer of another job may commit between two ranks' read-only opens:
  // their listings then differ until both look again.
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    CKPTDB_ASSIGN_OR_RETURN(
        const bool agreed,
        SameStoreOnEveryRank(comm, store, path, attempt == kAttempts));
    if (agreed) return Status::OK();
    CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(comm, store.Refresh()));
  }
}

}  // namespace

Result<std::unique_ptr<DB>> OpenDB(const Options& options,
                                   const std::string& path,
                                   std::shared_ptr<Communicator> comm,
                                   DeviceSeams devices) {
  if (!comm) comm = SingleProcessCommunicator();
  // Every collective message checked on arrival: a damaged one fails the call
  // naming its rank rather than decoding into another id or outcome.
  comm = SealedCommunicator(std::move(comm));
  // RocksDB's background threads start with the first store.
  ExitForkedChildrenAtOnce();
  // First, the options of every rank: a rank whose own are bad still meets
  // the others here, and every rank fails naming it.
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(*comm, CheckOptions(options)));
  // Then those every rank acts on alike: a rank opened read-only among
  // read-write ones, or keeping other checkpoints, fails every rank naming it.
  CKPTDB_RETURN_IF_ERROR(
      AllGatherAgreed(*comm, OpenArguments(options), "").status());
  storage::StoreOptions store_options;
  store_options.create_if_missing = options.create_if_missing;
  store_options.sync = options.sync;
  store_options.file_system_hooks = options.file_system_hooks;
  // Rank 0 opens (and maybe creates) the store first; the others then open
  // read-only handles.
  Result<std::unique_ptr<storage::Store>> store =
      Status::Internal("not opened");
  CKPTDB_RETURN_IF_ERROR(StatusFromRoot(*comm, [&] {
    store_options.read_only = options.read_only;
    store = storage::Store::Open(path, store_options);
    return store.status();
  }));
  Status local;
  if (comm->rank() != 0) {
    store_options.read_only = true;
    store = storage::Store::Open(path, store_options);
    local = store.status();
  }
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(*comm, local));
  CKPTDB_RETURN_IF_ERROR(AgreeOnStore(*comm, **store, path));
  return BindToProcess(std::unique_ptr<DB>(new DBImpl(
                           options, path, std::move(comm),
                           std::move(store).value(), std::move(devices))),
                       path);
}

DBImpl::DBImpl(Options options, std::string path,
               std::shared_ptr<Communicator> comm,
               std::unique_ptr<storage::Store> store, DeviceSeams devices)
    : options_(std::move(options)),
      path_(std::move(path)),
      comm_(std::move(comm)),
      store_(std::move(store)),
      devices_(std::move(devices)) {
  // The first asynchronous save then copies into memory already touched.
  if (options_.snapshot_bytes > 0 && !options_.read_only)
    snapshot_memory_.Prepare(options_.snapshot_bytes);
}

DBImpl::~DBImpl() {
  // A destructor cannot return it: the one place left to say it.
  const Status unreported = WaitPending();
  if (!unreported.ok())
    std::fprintf(stderr, "ckptdb: store '%s': %s\n", path_.c_str(),
                 unreported.ToString().c_str());
}

int DBImpl::io_threads() const {
  if (options_.io_threads > 0) return options_.io_threads;
  // One thread per hardware thread, at least 2 so that a read waiting on
  // storage overlaps another's checksum and copy. More than that per core
  // measured no faster for loads and saves, and slower for reshards, whose
  // exchange competes with the readers for the cores (bench/README.md).
  return static_cast<int>(
      std::clamp(std::thread::hardware_concurrency(), 2u, 8u));
}

uint64_t DBImpl::load_buffer_bytes(uint64_t state_bytes) const {
  if (options_.load_buffer_bytes > 0) return options_.load_buffer_bytes;
  // A 16th of the state, within [8 MiB, 64 MiB]: few enough rounds that a
  // rank rarely waits for a peer that another process holds off its core,
  // small enough that reading the next round overlaps exchanging this one
  // (bench/README.md has the measurements).
  constexpr uint64_t kMin = uint64_t{8} << 20, kMax = uint64_t{64} << 20;
  return std::clamp(state_bytes / 16, kMin, kMax);
}

Status DBImpl::CheckOpen() const {
  if (!store_)
    return Status::FailedPrecondition("store '" + path_ + "' is closed");
  return Status::OK();
}

Result<CheckpointMetadata> DBImpl::ResolveLocal(
    const CheckpointSelector& which) {
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  // A read-only handle sees the store as of its open: look again for later
  // commits (a no-op when nothing changed, or for the read-write handle).
  CKPTDB_RETURN_IF_ERROR(store_->Refresh());
  CKPTDB_ASSIGN_OR_RETURN(int64_t id, store_->Resolve(which));
  return store_->GetMetadata(id);
}

Result<CheckpointMetadata> DBImpl::ResolveCollective(
    const CheckpointSelector& which, const CallArguments& args,
    const std::vector<std::string_view>* tensor_keys, int64_t* resolved) {
  CKPTDB_ASSIGN_OR_RETURN(
      int64_t id, IdFromRootAgreed(*comm_, args, [&]() -> Result<int64_t> {
        CKPTDB_RETURN_IF_ERROR(store_->Refresh());
        return store_->Resolve(which);
      }));
  if (resolved != nullptr) *resolved = id;
  Status refreshed = store_->Refresh();
  Result<CheckpointMetadata> meta =
      !refreshed.ok() ? Result<CheckpointMetadata>(refreshed)
      : tensor_keys   ? store_->GetMetadata(id, *tensor_keys)
                      : store_->GetMetadata(id);
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(*comm_, meta.status()));
  return meta;
}

Result<std::vector<CheckpointInfo>> DBImpl::ListCheckpoints() {
  std::shared_lock local(open_mu_);
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  CKPTDB_RETURN_IF_ERROR(store_->Refresh());
  return store_->List();
}

Result<CheckpointMetadata> DBImpl::GetMetadata(
    const CheckpointSelector& which) {
  std::shared_lock local(open_mu_);
  return ResolveLocal(which);
}

Status DBImpl::Delete(const CheckpointSelector& which) {
  std::lock_guard one_at_a_time(collective_mu_);
  CKPTDB_RETURN_IF_ERROR(WaitPending());
  return NotingPeerClosing(DeleteNow(which));
}

Status DBImpl::DeleteNow(const CheckpointSelector& which) {
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  // The writer changes the store only once every rank is inside the call (the
  // all-gather that checks the selector), so that no rank's earlier local call
  // (a listing, a read) races with it.
  CKPTDB_RETURN_IF_ERROR(
      AllGatherAgreed(*comm_, DeleteArguments(which), "").status());
  const bool root = comm_->rank() == 0;
  int64_t id = 0;
  Status own;  // rank 0's outcome
  std::string outcome;
  if (root) {
    // A read-only handle says so, whatever its view of the selector (one
    // taken before the checkpoint was saved would not find it).
    Result<int64_t> resolved =
        store_->read_only() ? Result<int64_t>(0) : store_->Resolve(which);
    if (resolved.ok()) id = *resolved;
    own = resolved.ok() ? store_->Delete(id) : resolved.status();
    outcome = EncodeStatus(own);
  }
  Status shared = comm_->Broadcast(&outcome, 0);
  Status deleted;
  if (shared.ok()) shared = DecodeStatus(outcome, &deleted);
  // Also after a failure: the delete may have taken effect.
  LetGoOfDeletedFiles();
  if (shared.ok()) return deleted;
  if (!root) {
    return OutcomeNotLearned(
        shared, "the checkpoint with " + which.ToString() + " may be deleted");
  }
  if (!own.ok()) return own;
  return OutcomeNotShared(
      shared, "checkpoint id " + std::to_string(id) + " is deleted");
}

void DBImpl::LetGoOfDeletedFiles() {
  // A read-only handle keeps the table files it has opened, deleted or not,
  // until it closes: the space of a deleted checkpoint comes back only once
  // no rank holds its files. Closed, not re-opened: the next call that reads
  // the store opens it (a save loop's next save writes staged files only, so
  // these ranks do not re-open on the save's path).
  if (comm_->rank() != 0) store_->Release();
}

Status DBImpl::Close() {
  std::lock_guard one_at_a_time(collective_mu_);
  // Closed all the same: the save is over, its error is the close's.
  const Status unreported = WaitPending();
  if (!store_) return unreported;
  // An empty part of an all-gather rather than a barrier: a rank closing
  // (an exception ended its `with` block) while the others start a save,
  // load or delete meets their first all-gather, which then fails naming it
  // (AllGatherAgreed); an MPI barrier against an all-gather waited forever.
  // A rank that saw another close during a call (peer_closing_) closes on
  // its own: that rank has left, and nothing would meet its part.
  Status barrier = peer_closing_ ? Status::OK() : comm_->AllGather("").status();
  // After the local calls under way (reads, listings on other threads).
  std::unique_lock closing(open_mu_);
  transport_.reset();
  store_.reset();
  load_scratch_ = LoadScratch();
  return unreported.ok() ? barrier : unreported;
}

}  // namespace engine
}  // namespace ckptdb
