// ckpt-bench: end-to-end save / load / reshard throughput of ckptdb, next to
// the same bytes moved as plain files by the same ranks, in the same run.
//
//   mpirun -np 2 build/bench/ckpt-bench --dir /dev/shm/b --size 2G
//
// The state is `--tensors` 2-D tensors of `--dtype`, split by rows over the
// ranks. Workloads:
//   save     Save of every rank's shards   vs  each rank writes its shards to
//            (--changed of them changed        one file, then fsync; and the
//            since the last save)              same save with incremental
//                                              saves off, in a store of its own
//   load     Load into the same layout     vs  each rank reads its file back
//   reshard  Load split by columns over    vs  those ranks read an equal share
//            --reshard-ranks ranks             of the files
//   async    SaveAsync until it returns    vs  a memcpy of the rank's bytes
//            (the stall), and until Wait       into preallocated memory; a
//            returns (the commit), of a state  blocking save, and SaveAsync
//            --changed as for save             with incremental saves off, each
//                                              in a store of its own
//   incremental  Save of the state with       vs  a full save of the state
//   (time
//            --changed of its tensors changed  and bytes written), in a store
//            since the last save               of its own
// Loads run warm (page cache full) and, where caches can be dropped (not on
// tmpfs), cold: every file of the store or of the baseline is fsynced and
// dropped with posix_fadvise(DONTNEED) first. Each measurement is the median of
// --repeat runs, ckptdb and baseline alternating. Loaded bytes are verified.
// Below the table, the ceilings of this machine, from baselines of the same
// run: the most a checksumming save, an incremental save without change
// tracking and a copying reshard could reach (PrintCeilings).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/baselines.h"
#include "bench/harness.h"
#include "ckptdb/db.h"
#include "ckptdb/mpi.h"

namespace {

namespace fs = std::filesystem;
using namespace ckptdb::bench;  // NOLINT: the harness is this tool's own
using ckptdb::DType;
using ckptdb::Shape;
using ckptdb::StateDict;
using ckptdb::TensorView;

// One line of the report.
struct Row {
  std::string workload, cache;
  int ranks = 0;
  uint64_t bytes = 0;
  double seconds = 0, baseline_seconds = 0;  // medians
  double ratio = 0;                          // MedianRatio
  // Loads: the baseline read plus checksums; saves: the baseline write of
  // hashed pieces (BaselineWrite with `check`); 0 where not measured.
  double checked_seconds = 0;
  double checked_ratio = 0;
  // Reshards: the checked read, then the bytes ckptdb sent sent as plain MPI
  // messages (ExchangeFloor). Incremental saves: IncrementalFloor. 0 where not
  // measured.
  double floor_seconds = 0;
  double floor_ratio = 0;
  // Async saves: seconds until the commit (`seconds` is the stall).
  double commit_seconds = 0;
  // Async saves: the stall of the handle's first SaveAsync, over the memcpy
  // of the same run; the blocking save of the same state (Save, default
  // options), and the median over runs of commit / blocking seconds.
  double first_stall = 0, first_ratio = 0;
  double blocking_seconds = 0, commit_over_blocking = 0;
  // Save and async: the same save with Options::incremental off (stall and
  // commit for async), and the medians over runs of ckptdb / off seconds.
  double off_seconds = 0, off_commit_seconds = 0;
  double over_off = 0, commit_over_off = 0;
  std::string baseline{};
  uint64_t read = 0, needed = 0, sent = 0;
  bool has_read = false;
  // Incremental saves: bytes the save wrote; 0 where not measured.
  uint64_t written = 0;
  std::vector<double> extra_mib{};  // per rank
  std::vector<double> held_mib{};   // per rank: its shards or targets
};

// --- workloads --------------------------------------------------------------

class Bench {
 public:
  Bench(Config c, int rank, int world)
      : c_(std::move(c)), rank_(rank), world_(world) {
    tmpfs_ = IsTmpfs(c_.dir);
  }

  void Run() {
    ckptdb::Options options;
    options.io_threads = c_.io_threads;
    if (c_.chunk_bytes > 0) options.max_chunk_bytes = c_.chunk_bytes;
    options.load_buffer_bytes = c_.load_buffer_bytes;
    options.snapshot_bytes = c_.snapshot_bytes;
    store_ = c_.dir + "/store";
    if (rank_ == 0) {
      std::error_code ec;
      fs::remove_all(store_, ec);
      fs::remove_all(c_.dir + "/baseline", ec);
      fs::create_directories(c_.dir + "/baseline");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    auto comm = ckptdb::MpiCommunicator(MPI_COMM_WORLD);
    Check(comm.status(), "communicator");
    auto db = ckptdb::DB::Open(options, store_, *comm);
    Check(db.status(), "opening the store");

    source_ = MakeLayout(c_, 0, rank_, world_);
    for (size_t i = 0; i < source_.boxes.size(); ++i)
      Generate(source_.boxes[i], source_.cols, source_.esize,
               source_.buffers[i].data());
    per_writer_ = source_.bytes();  // every rank holds an equal share
    total_ = Reduce<uint64_t>(source_.bytes(), MPI_SUM);

    // Always save once: the load workloads read this checkpoint.
    const bool want_save = Wants("save");
    SaveWorkload(**db, want_save, options);
    if (Wants("load")) LoadWorkload(**db);
    if (Wants("async")) AsyncWorkload(**db, options);
    db->reset();
    if (Wants("incremental")) IncrementalWorkload(options);
    if (Wants("reshard")) ReshardWorkload(options);
    source_ = Layout();
    if (rank_ == 0 && !c_.keep) {
      std::error_code ec;
      fs::remove_all(store_, ec);
      fs::remove_all(c_.dir + "/baseline", ec);
    }
    Print();
  }

 private:
  bool Wants(const std::string& w) const {
    return std::find(c_.workloads.begin(), c_.workloads.end(), w) !=
           c_.workloads.end();
  }

  std::vector<double> Gather(double v, MPI_Comm comm) {
    int n = 0;
    MPI_Comm_size(comm, &n);
    std::vector<double> all(n);
    MPI_Allgather(&v, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm);
    return all;
  }

  // The tensors that change between saves: the first --changed share of
  // them, rounded up.
  size_t ChangedTensors() const {
    const size_t n = source_.buffers.size();
    return std::min(n, static_cast<size_t>(std::ceil(c_.changed * n - 1e-9)));
  }

  // Changes every byte of the changed tensors (untimed): each save then
  // finds them different from the last one.
  void ChangeState() {
    for (size_t t = 0; t < ChangedTensors(); ++t) {
      for (auto& b : source_.buffers[t]) b ^= 0x5A;
    }
  }

  // The generated state again (the loads check what they read against it).
  void Regenerate() {
    for (size_t i = 0; i < source_.boxes.size(); ++i)
      Generate(source_.boxes[i], source_.cols, source_.esize,
               source_.buffers[i].data());
  }

  // Deletes every checkpoint of `db` but the latest (untimed): the next save
  // compares with it, and the store holds at most two states.
  void KeepLatest(ckptdb::DB& db) {
    auto all = db.ListCheckpoints();
    Check(all.status(), "listing checkpoints");
    for (size_t i = 0; i + 1 < all->size(); ++i) {
      Check(db.Delete(ckptdb::CheckpointSelector::Id((*all)[i].id)),
            "deleting a checkpoint");
    }
  }

  // A handle of its own on `name` under --dir, emptied first.
  std::unique_ptr<ckptdb::DB> OpenOwn(const std::string& name,
                                      ckptdb::Options options) {
    const std::string dir = c_.dir + "/" + name;
    if (rank_ == 0) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    auto comm = ckptdb::MpiCommunicator(MPI_COMM_WORLD);
    Check(comm.status(), "communicator");
    auto db = ckptdb::DB::Open(options, dir, *comm);
    Check(db.status(), ("opening the store " + dir).c_str());
    return std::move(db).value();
  }

  void RemoveOwn(std::unique_ptr<ckptdb::DB> db, const std::string& name) {
    db.reset();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0 && !c_.keep) {
      std::error_code ec;
      fs::remove_all(c_.dir + "/" + name, ec);
    }
  }

  // Each run: --changed of the tensors changed, then a save into `db`, which
  // holds the previous run's checkpoint, against the plain write and the
  // same save into a store with incremental saves off, order alternating.
  // Afterwards (and alone when not recorded) the generated state is saved
  // with tag "bench", which the loads read.
  void SaveWorkload(ckptdb::DB& db, bool record, ckptdb::Options options) {
    StateDict sd = source_.Dict(c_.dtype);
    if (record) MeasureSaves(db, sd, options);
    Regenerate();
    const ckptdb::Status deleted =
        db.Delete(ckptdb::CheckpointSelector::Tag("bench"));
    if (!deleted.IsNotFound()) Check(deleted, "deleting the previous run");
    Check(db.Save(sd, {.step = -1, .tag = "bench"}).status(), "save");
  }

  void MeasureSaves(ckptdb::DB& db, const StateDict& sd,
                    ckptdb::Options options) {
    options.incremental = false;
    auto off = OpenOwn("store-incremental-off", options);
    std::vector<double> ours, base, checked, full;
    double extra = 0;
    // Each side's previous output is deleted, untimed, right before it
    // writes again: neither pays for freeing the old bytes, and both write
    // into pages just freed (on a VM that hands free pages back to the host,
    // pages freed long before cost more to touch again).
    const std::string file = BaselineFile(c_, rank_);
    // Two untimed saves into each store first: from the third on, a save
    // writes into the pages its deletion of the save before last freed, as
    // in a job that keeps its last checkpoints, and as the baseline rewrites
    // its file. Until then a store's saves take pages nothing freed just
    // before; on this project's VM such saves measured 2-7x slower, in
    // whichever store met them, which a median of 5 runs did not hide.
    for (int w = 0; w < 2; ++w) {
      ChangeState();
      KeepLatest(db);
      Check(db.Save(sd, {}).status(), "save (warm-up)");
      KeepLatest(*off);
      Check(off->Save(sd, {}).status(), "save (warm-up)");
    }
    for (int i = 0; i < c_.repeat; ++i) {
      ChangeState();
      auto baseline = [&] {
        ::unlink(file.c_str());
        base.push_back(
            Timed(MPI_COMM_WORLD, [&] { BaselineWrite(c_, rank_, source_); }));
        ::unlink(file.c_str());
        checked.push_back(Timed(MPI_COMM_WORLD, [&] {
          BaselineWrite(c_, rank_, source_, /*check=*/true);
        }));
      };
      auto incremental_off = [&] {
        KeepLatest(*off);
        full.push_back(Timed(MPI_COMM_WORLD, [&] {
          Check(off->Save(sd, {.step = i}).status(), "save, incremental off");
        }));
      };
      if (i % 2 == 1) baseline(), incremental_off();  // every other run first
      KeepLatest(db);
      RssProbe probe;
      ours.push_back(Timed(MPI_COMM_WORLD, [&] {
        auto info = db.Save(sd, {.step = i});
        Check(info.status(), "save");
      }));
      extra = std::max(extra, probe.ExtraMiB());
      if (i % 2 == 0) incremental_off(), baseline();
    }
    RemoveOwn(std::move(off), "store-incremental-off");
    Row row{"save", tmpfs_ ? "tmpfs" : "disk", world_, total_};
    row.seconds = Median(ours);
    row.baseline_seconds = Median(base);
    row.ratio = MedianRatio(base, ours);
    row.checked_seconds = Median(checked);
    row.checked_ratio = MedianRatio(checked, ours);
    row.off_seconds = Median(full);
    row.over_off = 1 / MedianRatio(full, ours);
    row.baseline = "write+fsync";
    row.extra_mib = Gather(extra, MPI_COMM_WORLD);
    row.held_mib = Gather(source_.bytes() / kMiB, MPI_COMM_WORLD);
    rows_.push_back(row);
  }

  // Asynchronous saves of a state --changed before each: the stall (until
  // SaveAsync returns) against a memcpy of each rank's bytes into
  // preallocated memory, and the time until the commit against a blocking
  // save of the same state; the same async save with incremental saves off.
  // Each kind saves into a store of its own that keeps the last checkpoint,
  // in an order that rotates from run to run. The first run, the handle's
  // first SaveAsync, is reported alone.
  void AsyncWorkload(ckptdb::DB& db, ckptdb::Options options) {
    StateDict sd = source_.Dict(c_.dtype);
    std::vector<uint8_t> copy(source_.bytes(), 1);
    auto blocking = OpenOwn("store-blocking", options);
    options.incremental = false;
    auto off = OpenOwn("store-async-incremental-off", options);
    std::vector<double> stalls, commits, base, blocked, off_stalls, off_commits;
    double first_stall = 0, first_memcpy = 0;
    auto save_async = [&](ckptdb::DB& d, int step, std::vector<double>* stall,
                          std::vector<double>* commit) {
      KeepLatest(d);
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = Now();
      auto started = d.SaveAsync(sd, {.step = step});
      Check(started.status(), "save_async");
      stall->push_back(Reduce(Now() - start, MPI_MAX));
      Check((*started)->Wait().status(), "async save");
      commit->push_back(Reduce(Now() - start, MPI_MAX));
    };
    std::vector<std::function<void(int)>> kinds = {
        [&](int i) { save_async(db, 1000 + i, &stalls, &commits); },
        [&](int i) { save_async(*off, 1000 + i, &off_stalls, &off_commits); },
        [&](int i) {
          KeepLatest(*blocking);
          blocked.push_back(Timed(MPI_COMM_WORLD, [&] {
            Check(blocking->Save(sd, {.step = 1000 + i}).status(), "save");
          }));
        }};
    for (int i = 0; i <= c_.repeat; ++i) {
      ChangeState();
      base.push_back(Timed(MPI_COMM_WORLD, [&] {
        size_t at = 0;
        for (const auto& b : source_.buffers) {
          std::memcpy(copy.data() + at, b.data(), b.size());
          at += b.size();
        }
        benchmark_sink = copy[at / 2];
      }));
      for (size_t k = 0; k < kinds.size(); ++k)
        kinds[(k + static_cast<size_t>(i)) % kinds.size()](i);
      if (i > 0) continue;
      first_stall = stalls[0];
      first_memcpy = base[0];
      for (auto* v :
           {&stalls, &commits, &base, &blocked, &off_stalls, &off_commits})
        v->clear();
    }
    RemoveOwn(std::move(blocking), "store-blocking");
    RemoveOwn(std::move(off), "store-async-incremental-off");
    // The store of `db` keeps the tag "bench" for loads; the async saves go.
    auto all = db.ListCheckpoints();
    Check(all.status(), "listing checkpoints");
    for (const auto& info : *all) {
      if (info.step && *info.step >= 1000)
        Check(db.Delete(ckptdb::CheckpointSelector::Id(info.id)), "delete");
    }
    Regenerate();
    Row row{"async", tmpfs_ ? "tmpfs" : "disk", world_, total_};
    row.seconds = Median(stalls);
    row.baseline_seconds = Median(base);
    row.ratio = MedianRatio(base, stalls);
    row.baseline = "memcpy";
    row.commit_seconds = Median(commits);
    row.first_stall = first_stall;
    row.first_ratio = first_memcpy / first_stall;
    row.blocking_seconds = Median(blocked);
    row.commit_over_blocking = 1 / MedianRatio(blocked, commits);
    row.off_seconds = Median(off_stalls);
    row.off_commit_seconds = Median(off_commits);
    row.over_off = 1 / MedianRatio(off_stalls, stalls);
    row.commit_over_off = 1 / MedianRatio(off_commits, commits);
    row.extra_mib = Gather(0.0, MPI_COMM_WORLD);
    row.held_mib = Gather(source_.bytes() / kMiB, MPI_COMM_WORLD);
    rows_.push_back(row);
  }

  // Loads into `target` on `comm` and reads the same number of bytes from the
  // baseline files; warm and (off tmpfs) cold.
  void MeasureLoad(const std::string& name, ckptdb::DB& db, Layout& target,
                   MPI_Comm comm) {
    int rank = 0, ranks = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    StateDict sd = target.Dict(c_.dtype);
    const uint64_t mine = target.bytes();
    uint64_t from = 0;
    MPI_Exscan(&mine, &from, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm);
    if (rank == 0) from = 0;
    // Same layout as saved: each rank reads its own file.
    const bool own_files = name == "load";
    for (const bool cold : {false, true}) {
      if (cold && tmpfs_) continue;
      std::vector<double> ours, base, checked;
      double extra = 0;
      ckptdb::LoadStats stats;
      for (int i = 0; i < c_.repeat; ++i) {
        auto baselines = [&] {
          if (cold && rank == 0) DropCaches(c_.dir + "/baseline");
          base.push_back(Timed(comm, [&] {
            BaselineRead(c_, world_, per_writer_,
                         own_files ? per_writer_ * rank : from, target);
          }));
          if (cold && rank == 0) DropCaches(c_.dir + "/baseline");
          checked.push_back(Timed(comm, [&] {
            BaselineRead(c_, world_, per_writer_,
                         own_files ? per_writer_ * rank : from, target,
                         /*check=*/true);
          }));
        };
        if (i % 2 == 1) baselines();  // every other run goes first
        if (cold && rank == 0) DropCaches(store_);
        RssProbe probe;
        ours.push_back(Timed(comm, [&] {
          auto result =
              db.Load(sd, ckptdb::CheckpointSelector::Tag("bench"), {});
          Check(result.status(), "load");
          stats = result->stats;
        }));
        extra = std::max(extra, probe.ExtraMiB());
        if (c_.verify) VerifyTargets(target, comm);
        if (i % 2 == 0) baselines();
      }
      Row row{name, tmpfs_ ? "tmpfs" : (cold ? "disk, cold" : "disk, warm"),
              ranks, Reduce<uint64_t>(mine, MPI_SUM, comm)};
      row.seconds = Median(ours);
      row.baseline_seconds = Median(base);
      row.checked_seconds = Median(checked);
      row.ratio = MedianRatio(base, ours);
      row.checked_ratio = MedianRatio(checked, ours);
      if (name == "reshard" && ranks > 1) {
        std::vector<double> floor;
        for (int i = 0; i < c_.repeat; ++i) {
          if (cold && rank == 0) DropCaches(c_.dir + "/baseline");
          floor.push_back(Timed(comm, [&] {
            BaselineRead(c_, world_, per_writer_, from, target, /*check=*/true);
            ExchangeFloor(comm, stats.bytes_sent, target);
          }));
        }
        row.floor_seconds = Median(floor);
        row.floor_ratio = row.floor_seconds / row.seconds;
      }
      row.baseline = cold ? "read, cold" : "read, warm";
      row.has_read = true;
      row.read = Reduce<uint64_t>(stats.bytes_read, MPI_SUM, comm);
      row.needed = Reduce<uint64_t>(stats.bytes_needed, MPI_SUM, comm);
      row.sent = Reduce<uint64_t>(stats.bytes_sent, MPI_SUM, comm);
      row.extra_mib = Gather(extra, comm);
      row.held_mib = Gather(mine / kMiB, comm);
      if (rank == 0) rows_.push_back(row);
    }
  }

  void VerifyTargets(Layout& target, MPI_Comm comm) {
    uint64_t bad = 0;
    for (size_t i = 0; i < target.boxes.size(); ++i) {
      if (!Matches(target.boxes[i], target.cols, target.esize,
                   target.buffers[i].data()))
        ++bad;
      std::fill(target.buffers[i].begin(), target.buffers[i].end(), 0);
    }
    if (Reduce<uint64_t>(bad, MPI_SUM, comm) != 0)
      Die("loaded bytes differ from the saved ones");
  }

  // Deletes every checkpoint of `db`.
  void DeleteAll(ckptdb::DB& db) {
    auto all = db.ListCheckpoints();
    Check(all.status(), "listing checkpoints");
    for (const auto& info : *all) {
      Check(db.Delete(ckptdb::CheckpointSelector::Id(info.id)),
            "deleting a checkpoint");
    }
  }

  // Each run: a full save into an empty store, then --changed of the tensors
  // changed in every byte, then the incremental save.
  void IncrementalWorkload(const ckptdb::Options& options) {
    const std::string dir = c_.dir + "/incremental";
    std::unique_ptr<ckptdb::DB> db = OpenOwn("incremental", options);
    StateDict sd = source_.Dict(c_.dtype);
    const size_t changed = ChangedTensors();
    std::vector<double> full, incremental, floor;
    uint64_t written = 0;
    for (int i = 0; i < c_.repeat; ++i) {
      DeleteAll(*db);
      full.push_back(Timed(MPI_COMM_WORLD, [&] {
        Check(db->Save(sd, {.step = 2 * i}).status(), "full save");
      }));
      ChangeState();
      incremental.push_back(Timed(MPI_COMM_WORLD, [&] {
        auto info = db->Save(sd, {.step = 2 * i + 1});
        Check(info.status(), "incremental save");
        written = static_cast<uint64_t>(info->nbytes_written);
      }));
      ::unlink(ChangedFile(c_, rank_).c_str());  // as the save before
      floor.push_back(Timed(MPI_COMM_WORLD, [&] {
        IncrementalFloor(c_, rank_, source_, changed);
      }));
    }
    DeleteAll(*db);
    db.reset();
    Regenerate();
    Row row{"incremental", tmpfs_ ? "tmpfs" : "disk", world_, total_};
    row.seconds = Median(incremental);
    row.baseline_seconds = Median(full);
    row.ratio = MedianRatio(full, incremental);
    row.baseline = "full save";
    row.floor_seconds = Median(floor);
    row.floor_ratio = row.floor_seconds / row.seconds;
    row.written = written;
    row.extra_mib = Gather(0, MPI_COMM_WORLD);
    row.held_mib = Gather(source_.bytes() / kMiB, MPI_COMM_WORLD);
    rows_.push_back(row);
    if (rank_ == 0 && !c_.keep) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }

  void LoadWorkload(ckptdb::DB& db) {
    Layout target = MakeLayout(c_, 0, rank_, world_);
    MeasureLoad("load", db, target, MPI_COMM_WORLD);
  }

  // Columns over the first --reshard-ranks ranks, through their own handle.
  void ReshardWorkload(const ckptdb::Options& base_options) {
    const int ranks = c_.reshard_ranks > 0 ? c_.reshard_ranks : world_;
    MPI_Comm sub;
    MPI_Comm_split(MPI_COMM_WORLD, rank_ < ranks ? 0 : MPI_UNDEFINED, rank_,
                   &sub);
    if (sub != MPI_COMM_NULL) {
      // A source layout is not needed by the loaders: free it first so the
      // memory figures show the load alone.
      source_ = Layout();
      ckptdb::Options options = base_options;
      options.create_if_missing = false;
      auto comm = ckptdb::MpiCommunicator(sub);
      Check(comm.status(), "communicator");
      auto db = ckptdb::DB::Open(options, store_, *comm);
      Check(db.status(), "opening the store for resharding");
      Layout target = MakeLayout(c_, 1, rank_, ranks);
      MeasureLoad("reshard", **db, target, sub);
      db->reset();
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  void Print() {
    if (rank_ != 0) return;
    if (c_.json) {
      PrintJson();
      return;
    }
    PrintTable();
  }

  void PrintJson() {
    {
      for (const Row& r : rows_) {
        nlohmann::json j = {
            {"workload", r.workload},
            {"storage", r.cache},
            {"dir", c_.dir},
            {"ranks", r.ranks},
            {"writer_ranks", world_},
            {"tensors", c_.tensors},
            {"dtype", c_.dtype_name},
            {"bytes", r.bytes},
            {"seconds", r.seconds},
            {"gib_per_s", r.bytes / kGiB / r.seconds},
            {"baseline", r.baseline},
            {"baseline_seconds", r.baseline_seconds},
            {"baseline_gib_per_s", r.bytes / kGiB / r.baseline_seconds},
            {"ratio", r.ratio},
            {"bytes_sent", r.sent},
            {"extra_rss_mib_per_rank", r.extra_mib},
            {"held_mib_per_rank", r.held_mib},
        };
        if (r.checked_seconds > 0) {
          j["checked_baseline_seconds"] = r.checked_seconds;
          j["checked_ratio"] = r.checked_ratio;
        }
        if (r.has_read) {
          j["bytes_read"] = r.read;
          j["bytes_needed"] = r.needed;
          j["read_over_needed"] = static_cast<double>(r.read) / r.needed;
        }
        j["changed"] = c_.changed;
        if (r.commit_seconds > 0) {
          j["commit_seconds"] = r.commit_seconds;
          j["first_stall_seconds"] = r.first_stall;
          j["first_stall_over_memcpy"] = 1 / r.first_ratio;
          j["blocking_save_seconds"] = r.blocking_seconds;
          j["commit_over_blocking"] = r.commit_over_blocking;
          j["off_commit_seconds"] = r.off_commit_seconds;
          j["commit_over_off"] = r.commit_over_off;
        }
        if (r.off_seconds > 0) {
          j["incremental_off_seconds"] = r.off_seconds;
          j["over_incremental_off"] = r.over_off;
        }
        if (r.floor_seconds > 0) {
          j["floor_baseline_seconds"] = r.floor_seconds;
          j["floor_ratio"] = r.floor_ratio;
          if (const Row* load = SameLayoutLoad(r))
            j["floor_over_load"] = load->seconds / r.floor_seconds;
        }
        if (r.workload == "incremental") {
          j["bytes_written"] = r.written;
          j["time_over_full"] = r.seconds / r.baseline_seconds;
          j["written_over_full"] = static_cast<double>(r.written) / r.bytes;
          j["floor_over_full"] = r.floor_seconds / r.baseline_seconds;
        }
        std::printf("%s\n", j.dump().c_str());
      }
    }
  }

  void PrintTable() {
    std::printf(
        "ckpt-bench: %s of %s in %d tensors over %d writer ranks, %s, median "
        "of %d; %.0f%% of the tensors changed between saves\n",
        FormatBytes(total_).c_str(), c_.dtype_name.c_str(), c_.tensors, world_,
        c_.dir.c_str(), c_.repeat, 100 * c_.changed);
    std::printf(
        "%-8s %-11s %5s %9s %8s %8s %12s %9s %6s %8s %6s %11s %10s %12s\n",
        "workload", "storage", "ranks", "size", "seconds", "GiB/s", "baseline",
        "base GiB/s", "ratio", "checked", "floor", "read/needed", "sent",
        "extra RSS");
    for (const Row& r : rows_) {
      char read[32] = "-", checked[32] = "-", floor[32] = "-";
      if (r.floor_seconds > 0)
        std::snprintf(floor, sizeof floor, "%.2f", r.floor_ratio);
      if (r.checked_seconds > 0)
        std::snprintf(checked, sizeof checked, "%.2f", r.checked_ratio);
      if (r.has_read) {
        std::snprintf(read, sizeof read, "%.3f",
                      static_cast<double>(r.read) / r.needed);
      }
      const double extra =
          *std::max_element(r.extra_mib.begin(), r.extra_mib.end());
      std::printf(
          "%-8s %-11s %5d %9s %8.3f %8.2f %12s %9.2f %6.2f %8s %6s %11s %10s "
          "%8.1f MiB\n",
          r.workload.c_str(), r.cache.c_str(), r.ranks,
          FormatBytes(r.bytes).c_str(), r.seconds, r.bytes / kGiB / r.seconds,
          r.baseline.c_str(), r.bytes / kGiB / r.baseline_seconds, r.ratio,
          checked, floor, read, FormatBytes(r.sent).c_str(), extra);
    }
    PrintCeilings();
    for (const Row& r : rows_) {
      if (r.commit_seconds > 0) {
        std::printf(
            "async: seconds = the stall (until SaveAsync returns); committed "
            "%.3f s after the call (%.2f GiB/s), %.2fx a blocking save "
            "(%.3f s); the handle's first call stalled %.3f s (%.2fx its "
            "memcpy)\n"
            "async, incremental saves off: stall %.3f s, committed %.3f s; "
            "incremental on / off: stall %.3fx, commit %.3fx\n",
            r.commit_seconds, r.bytes / kGiB / r.commit_seconds,
            r.commit_over_blocking, r.blocking_seconds, r.first_stall,
            1 / r.first_ratio, r.off_seconds, r.off_commit_seconds, r.over_off,
            r.commit_over_off);
      }
      if (r.workload == "save" && r.off_seconds > 0) {
        std::printf(
            "save, incremental saves off: %.3f s; incremental on / off: "
            "%.3fx\n",
            r.off_seconds, r.over_off);
      }
      if (r.workload != "incremental") continue;
      std::printf(
          "incremental: %.3f s vs %.3f s for a full save (%.3fx); wrote %s of "
          "%s (%.3fx)\n",
          r.seconds, r.baseline_seconds, r.seconds / r.baseline_seconds,
          FormatBytes(r.written).c_str(), FormatBytes(r.bytes).c_str(),
          static_cast<double>(r.written) / r.bytes);
    }
    std::printf(
        "seconds = medians; ratio = the median over runs of baseline seconds "
        "/ ckptdb seconds, each run's pair measured back to back (alternating "
        "which goes first); checked = the same for a baseline read that also "
        "checksums each chunk-sized piece (XXH3, as ckptdb verifies every "
        "chunk), or a baseline write that hashes each chunk-sized piece "
        "(XXH3-128, as ckptdb checksums every chunk) before writing it; floor "
        "(reshard) = seconds of that checked read followed by the bytes ckptdb "
        "sent, sent as plain MPI messages in a ring into the targets' memory, "
        "/ ckptdb seconds; floor (incremental) = seconds of hashing every "
        "chunk-sized piece, then writing the changed tensors and fsync, / "
        "ckptdb seconds; extra RSS = the largest rank's peak resident memory "
        "beyond "
        "its state at the start\n");
  }

  // The load measured on the same storage as the reshard `r`, if any.
  const Row* SameLayoutLoad(const Row& r) const {
    if (r.workload != "reshard") return nullptr;
    for (const Row& l : rows_) {
      if (l.workload == "load" && l.cache == r.cache) return &l;
    }
    return nullptr;
  }

  // What the baselines say about the best ratio any implementation could
  // reach on this machine: a save that checksums its chunks, an incremental
  // save that finds the changed bytes by hashing, an exchange that copies.
  void PrintCeilings() const {
    for (const Row& r : rows_) {
      if (r.workload == "save" && r.checked_seconds > 0) {
        std::printf(
            "save (%s): a write of hashed pieces takes %.3f s: %.2fx of "
            "write+fsync is the most a save that checksums its chunks can "
            "reach here\n",
            r.cache.c_str(), r.checked_seconds,
            r.baseline_seconds / r.checked_seconds);
      }
      if (r.workload == "incremental" && r.floor_seconds > 0) {
        std::printf(
            "incremental (%s): hashing every byte and writing the changed "
            "tensors takes %.3f s: %.3fx of the full save is the least an "
            "incremental save without change tracking can take here\n",
            r.cache.c_str(), r.floor_seconds,
            r.floor_seconds / r.baseline_seconds);
      }
      if (const Row* load = SameLayoutLoad(r); load && r.floor_seconds > 0) {
        std::printf(
            "reshard (%s): the checked read and plain exchange take %.3f s: "
            "%.2fx of the same-layout load (%.3f s) is the most a reshard "
            "that copies what it sends can reach here\n",
            r.cache.c_str(), r.floor_seconds, load->seconds / r.floor_seconds,
            load->seconds);
      }
    }
  }

  static std::string FormatBytes(uint64_t n) {
    char out[32];
    if (n >= kGiB)
      std::snprintf(out, sizeof out, "%.2f GiB", n / kGiB);
    else
      std::snprintf(out, sizeof out, "%.1f MiB", n / kMiB);
    return out;
  }

  Config c_;
  int rank_, world_;
  bool tmpfs_ = false;
  std::string store_;
  Layout source_;
  uint64_t per_writer_ = 0, total_ = 0;
  std::vector<Row> rows_;
};

}  // namespace

int main(int argc, char** argv) {
  // MPI_THREAD_MULTIPLE: the async workload's saves commit from a thread.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  Config c;
  CLI::App app{
      "ckpt-bench: ckptdb save/load/reshard throughput against plain files "
      "of the same bytes; run under mpirun"};
  app.add_option("--dir", c.dir, "directory for the store and baseline files")
      ->required();
  app.add_option("--size", c.size, "total state size (K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("--tensors", c.tensors, "number of tensors")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--dtype", c.dtype_name, "element dtype")
      ->capture_default_str();
  app.add_option("--workloads", c.workloads,
                 "save, load, reshard, async, incremental")
      ->delimiter(',')
      ->check(
          CLI::IsMember({"save", "load", "reshard", "async", "incremental"}))
      ->capture_default_str();
  app.add_option("--reshard-ranks", c.reshard_ranks,
                 "ranks that load in the reshard workload (default: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--repeat", c.repeat, "runs per measurement (median)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--io-threads", c.io_threads, "Options::io_threads");
  app.add_option("--chunk", c.chunk,
                 "Options::max_chunk_bytes (K/M/G suffixes; default: the "
                 "library's)");
  app.add_option("--load-buffer", c.load_buffer,
                 "Options::load_buffer_bytes (K/M/G suffixes; default: the "
                 "library's)");
  app.add_option("--changed", c.changed,
                 "share of the tensors changed between saves (save, async, "
                 "incremental): 1 all, 0.1 a tenth, 0 none")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--snapshot", c.snapshot,
                 "Options::snapshot_bytes (K/M/G suffixes; default: the "
                 "library's)");
  app.add_flag("--json", c.json, "one JSON object per measurement");
  app.add_flag("!--no-verify", c.verify, "skip checking loaded bytes");
  app.add_flag("--keep", c.keep, "keep the store and baseline files");
  try {
    app.parse(argc, argv);
    c.bytes = ParseSize(c.size, "--size");
    if (c.chunk != "0") c.chunk_bytes = ParseSize(c.chunk, "--chunk");
    if (c.snapshot != "0")
      c.snapshot_bytes = ParseSize(c.snapshot, "--snapshot");
    if (c.load_buffer != "0")
      c.load_buffer_bytes = ParseSize(c.load_buffer, "--load-buffer");
    auto dtype = ckptdb::DTypeFromName(c.dtype_name);
    if (!dtype.ok())
      throw CLI::ValidationError("--dtype", dtype.status().ToString());
    c.dtype = *dtype;
    if (c.reshard_ranks > world)
      throw CLI::ValidationError(
          "--reshard-ranks",
          "more than the " + std::to_string(world) + " ranks of this job");
  } catch (const CLI::ParseError& e) {
    const int rc = rank == 0 ? app.exit(e) : (e.get_exit_code() ? 2 : 0);
    MPI_Finalize();
    return rc == 0 ? 0 : 2;
  }
  std::error_code ec;
  if (rank == 0) fs::create_directories(c.dir, ec);
  MPI_Barrier(MPI_COMM_WORLD);
  Bench(c, rank, world).Run();
  MPI_Finalize();
  return 0;
}
