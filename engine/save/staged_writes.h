#pragma once

// Writing a rank's chunks: into staged files, in parts of contiguous key
// ranges written in parallel; unchanged chunks of an incremental save are
// referred to, not written.
#include <cstdint>
#include <string>
#include <vector>

#include "ckptdb/status.h"
#include "engine/device/device.h"
#include "engine/save/save_layout.h"
#include "engine/save/save_record.h"
#include "engine/save/snapshot_ring.h"
#include "planner/incremental.h"
#include "planner/save_plan.h"
#include "storage/store.h"

namespace ckptdb::engine {

// How this rank writes its chunks.
struct WriteContext {
  int64_t id = 0;
  int rank = 0;
  int world = 1;
  int threads = 1;
  // Hash every chunk (incremental saves on).
  bool hash = false;
  // What the chunks are compared with.
  const planner::ComparedCheckpoints* compared = nullptr;
  // An asynchronous save: the chunks' bytes come from here (or, those it
  // hands the writers directly, from the caller's memory).
  SnapshotRing* snapshot = nullptr;
  // Otherwise device chunks are copied to the host by this.
  DeviceCopier* copier = nullptr;
};

// The bytes of the rank's chunks in write order: mine[order[i]].nbytes.
std::vector<uint64_t> BytesInWriteOrder(const std::vector<MyChunk>& mine,
                                        const std::vector<size_t>& order);

// Where each part of the rank's chunks (indexes into `order`) begins, with the
// end last: planner::SplitIntoParts of their bytes in write order.
std::vector<size_t> WriteParts(const std::vector<MyChunk>& mine,
                               const std::vector<size_t>& order, int threads);

// Streams this rank's chunks into staged files, a part each, in parallel;
// fills `written` (in plan order of the rank's chunks) and `files`.
Status WriteStaged(storage::Store& store, const planner::SavePlan& plan,
                   const std::vector<MyChunk>& mine,
                   const std::vector<size_t>& order,
                   const WriteContext& context,
                   std::vector<WrittenChunk>* written,
                   std::vector<std::string>* files);

}  // namespace ckptdb::engine
