// DB::SaveAsync: the rank's chunks copied into snapshot memory, then written
// and committed in the background.
#include "engine/save/async_save.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "engine/api/db_impl.h"
#include "engine/collectives/wire.h"
#include "engine/save/device_staging.h"
#include "engine/save/prepared_save.h"
#include "engine/save/snapshot_ring.h"
#include "engine/save/staged_writes.h"
#include "planner/write_parts.h"

namespace ckptdb::engine {
namespace {

// The machine's hardware threads, at least 1.
int MachineThreads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Processes on this host as the launcher tells them (torchrun, Open MPI,
// MPICH, Slurm); 1 when none does.
int ProcessesOnThisHost() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                           "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (end != value && n > 0) return static_cast<int>(std::min(n, 1L << 20));
  }
  return 1;
}

// Threads running or ready to run on the machine right now, this one
// included (Linux: /proc/stat's procs_running); 1 where unknown.
int RunnableThreads() {
#if defined(__linux__)
  std::FILE* stat = std::fopen("/proc/stat", "re");
  if (stat == nullptr) return 1;
  char line[256];
  long running = 1;
  while (std::fgets(line, sizeof(line), stat) != nullptr) {
    if (std::sscanf(line, "procs_running %ld", &running) == 1) break;
  }
  std::fclose(stat);
  return static_cast<int>(std::clamp(running, 1L, 1L << 20));
#else
  return 1;
#endif
}

}  // namespace

bool HasASpareCore() {
  return CoresOfThisProcess() >= 2 && RunnableThreads() < MachineThreads();
}

int CoresOfThisProcess() {
  const int machine = MachineThreads();
  int allowed = machine;
#if defined(__linux__)
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    allowed = std::max(1, CPU_COUNT(&set));
#endif
  // Bound to fewer cores than the machine has: the launcher gave them to
  // this process. Otherwise the host's processes share the machine.
  if (allowed < machine) return allowed;
  return std::max(1, machine / ProcessesOnThisHost());
}

namespace {

// A save as its errors name it: "step 7", "tag 'best' (step 7)", or "a
// checkpoint with no step or tag".
std::string SaveName(const SaveOptions& options) {
  std::string name;
  if (options.tag) name = "tag '" + *options.tag + "'";
  if (options.step) {
    const std::string step = "step " + std::to_string(*options.step);
    name = name.empty() ? step : name + " (" + step + ")";
  }
  return name.empty() ? "a checkpoint with no step or tag" : name;
}

}  // namespace

Result<std::shared_ptr<PendingSave>> DBImpl::SaveAsync(
    const StateDict& state, const SaveOptions& options) {
  std::lock_guard one_at_a_time(collective_mu_);
  CKPTDB_RETURN_IF_ERROR(WaitPending());
  return NotingPeerClosing(SaveAsyncNow(state, options));
}

Result<std::shared_ptr<PendingSave>> DBImpl::SaveAsyncNow(
    const StateDict& state, const SaveOptions& options) {
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  // The first exchange is the one a blocking save begins with, so that a rank
  // calling save while the others call save_async fails on every rank naming
  // both (and the handle's next call meets the others' again).
  auto prepared = std::make_shared<PreparedSave>();
  CKPTDB_ASSIGN_OR_RETURN(*prepared,
                          PrepareSave(state, options, false, "save_async",
                                      comm_->CheckBackgroundUse()));
  const PreparedSave& p = *prepared;
  uint64_t total = 0, largest = 0;
  for (const MyChunk& m : p.mine) {
    total += m.nbytes;
    largest = std::max(largest, m.nbytes);
  }
  uint64_t ring = options_.snapshot_bytes == 0
                      ? total
                      : std::min<uint64_t>(options_.snapshot_bytes, total);
  ring = std::max(ring, largest);
  bool fresh = false;
  Result<char*> memory = snapshot_memory_.Get(ring, &fresh);
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(*comm_, memory.status()));
  auto pending = std::make_shared<AsyncSave>(SaveName(options));
  auto start = [&](std::shared_ptr<SnapshotRing> snapshot) {
    pending->Start([this, prepared, snapshot] {
      return FinishSave(*prepared, snapshot.get());
    });
    pending_ = pending;
  };
  const bool on_host = std::all_of(p.mine.begin(), p.mine.end(),
                                   [](const MyChunk& m) { return !m.device; });
  // Writers beside the copy need a core the caller's copy does not use: on a
  // process with a single core they slowed the copy the caller waits for
  // (2 ranks on 2 cores: the stall went from 0.97x to 1.6x a memcpy), and so
  // they did beside other busy processes (one per core: 0.70-1.24x
  // -> 1.18-2.27x). Except into fresh memory, whose page faults make the
  // copy many times slower than the writers (the first call stalled ~30x a
  // memcpy copying all of it): there they write most chunks meanwhile.
  const bool beside = options_.writers_beside_snapshot.has_value()
                          ? *options_.writers_beside_snapshot
                          : fresh || HasASpareCore();
  if (ring >= total && on_host && beside) {
    // Memory for every chunk: the writers start at once, each at the front of
    // its part and straight from the caller's memory, while this thread
    // copies from the back of the parts; the call returns once the two meet
    // and the chunks written directly are done. The copy is then shorter than
    // the state, and the writers never wait for it (the commit of a state
    // that changed came 1.2-1.5x after a blocking save's when the writers
    // began after the whole copy).
    auto snapshot = std::make_shared<SnapshotRing>(
        *memory, BytesInWriteOrder(p.mine, p.order));
    start(snapshot);
    CopyFromTheBack(p, *snapshot);
  } else {
    auto snapshot =
        std::make_shared<SnapshotRing>(*memory, ring, p.mine.size());
    // Device chunks are copied in write order through staging buffers, and a
    // smaller ring needs the writers to make room: they start first.
    if (ring < total) start(snapshot);
    TakeSnapshot(p, *snapshot);
    if (ring >= total) start(snapshot);
  }
  prepared->views.clear();  // the caller's tensors are not used again
  // The pages the writers left untouched, for the next call.
  if (fresh) snapshot_memory_.TouchInBackground();
  return std::shared_ptr<PendingSave>(pending);
}

// Copies the chunks the writers have not taken, from the back of every part
// in turn, then waits for those they write from the caller's memory.
void DBImpl::CopyFromTheBack(const PreparedSave& p, SnapshotRing& snapshot) {
  DeviceChunks host(p.mine, p.order, nullptr);
  for (size_t i :
       planner::SnapshotCopyOrder(WriteParts(p.mine, p.order, io_threads()))) {
    char* place = snapshot.ClaimCopy(i);
    if (place == nullptr) continue;  // a writer has it
    const MyChunk& m = p.mine[p.order[i]];
    // Host chunks: the bytes themselves, or packed from a strided view.
    Result<const char*> bytes = host.HostBytes(i, p.order.size());
    if (!bytes.ok()) {
      snapshot.Fail(i, bytes.status());  // the save fails, in the background
      continue;
    }
    std::memcpy(place, *bytes, m.nbytes);
    snapshot.Ready(i, place);
  }
  snapshot.WaitForDirect();
}

// Copies the rank's chunks, in write order, into `ring` (waiting for room);
// device chunks through page-locked staging, the next copy overlapping this
// one. A failure fails the chunk and every later one: the save then fails on
// every rank, in the background.
void DBImpl::TakeSnapshot(const PreparedSave& p, SnapshotRing& ring) {
  DeviceChunks device(p.mine, p.order, devices_.copier);
  for (size_t i = 0; i < p.order.size(); ++i) {
    const MyChunk& m = p.mine[p.order[i]];
    Result<const char*> bytes = device.HostBytes(i, p.order.size());
    if (!bytes.ok()) {
      ring.Fail(i, bytes.status());
      return;
    }
    char* copy = ring.Allocate(i, m.nbytes);
    std::memcpy(copy, *bytes, m.nbytes);
    ring.Ready(i, copy);
  }
}

Status DBImpl::WaitPending() {
  if (pending_ == nullptr) return Status::OK();
  const std::shared_ptr<AsyncSave> pending = std::exchange(pending_, nullptr);
  (void)NotingPeerClosing(pending->Join());
  return pending->Unreported();
}

}  // namespace ckptdb::engine
