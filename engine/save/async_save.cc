// DB::SaveAsync: the rank's chunks copied into snapshot memory, then written
// and committed in the background.
#include "engine/save/async_save.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/api/db_impl.h"
#include "engine/collectives/wire.h"
#include "engine/save/device_staging.h"
#include "engine/save/prepared_save.h"
#include "engine/save/snapshot_ring.h"

namespace ckptdb::engine {
namespace {

// The background save yields to the caller's threads (the training step)
// where they compete for a core: its thread, and the writer threads it
// starts (which inherit the value), run at a nice value kBackgroundNice
// above the process's. Without competition it runs at full speed. Linux
// gives each thread its own nice value; elsewhere, or when refused, the
// priority stays.
constexpr int kBackgroundNice = 5;

}  // namespace

void LowerThisThreadsPriority() {
#if defined(__linux__)
  const auto tid = static_cast<id_t>(::syscall(SYS_gettid));
  errno = 0;
  const int current = ::getpriority(PRIO_PROCESS, tid);
  if (errno == 0)
    (void)::setpriority(PRIO_PROCESS, tid,
                        std::min(current + kBackgroundNice, 19));
#endif
}

Result<std::shared_ptr<PendingSave>> DBImpl::SaveAsync(
    const StateDict& state, const SaveOptions& options) {
  WaitPending();
  CKPTDB_RETURN_IF_ERROR(CheckOpen());
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(*comm_, comm_->CheckBackgroundUse()));
  auto prepared = std::make_shared<PreparedSave>();
  CKPTDB_ASSIGN_OR_RETURN(*prepared, PrepareSave(state, options));
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
  Result<char*> memory = snapshot_memory_.Get(ring);
  CKPTDB_RETURN_IF_ERROR(AgreeOnStatus(*comm_, memory.status()));
  auto snapshot = std::make_shared<SnapshotRing>(*memory, ring, p.mine.size());
  auto pending = std::make_shared<AsyncSave>();
  auto start = [&] {
    pending->Start([this, prepared, snapshot] {
      return FinishSave(*prepared, snapshot.get());
    });
    pending_ = pending;
  };
  // A ring that holds the whole state is filled before the writers start, so
  // that they do not slow the copy the caller waits for; a smaller one needs
  // them to make room.
  const bool whole = ring >= total;
  if (!whole) start();
  TakeSnapshot(p, *snapshot);
  prepared->views.clear();  // the caller's tensors are not used again
  if (whole) start();
  return std::shared_ptr<PendingSave>(pending);
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

void DBImpl::WaitPending() {
  if (pending_ == nullptr) return;
  (void)pending_->Wait();
  pending_.reset();
}

}  // namespace ckptdb::engine
