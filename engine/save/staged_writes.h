#pragma once

// Writing a rank's chunks: into staged files, in parts of contiguous key
// ranges written in parallel; unchanged chunks of an incremental save are
// referred to, not written.
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
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

// The stored chunks a handle has read and found intact before sharing them
// (or could not read: a read-only handle older than their holder). A chunk is
// checked at the first save of the handle that shares it and again every
// kRecheckSaves to 2 * kRecheckSaves - 1 saves after (spread by its key), not
// at every save, which would read a part of the state that stopped changing
// (a frozen base model under fine-tuning) whole each time: a save reads about
// a fifth of the bytes it shares, and bytes damaged after a check stop being
// shared within 2 * kRecheckSaves saves. Thread-safe.
class CheckedChunks {
 public:
  static constexpr uint64_t kRecheckSaves = 4;

  // `key`: the chunk's storage key (storage::AppendChunkKey of its holder).
  // Whether it was checked and is not due again.
  bool Fresh(int64_t holder_id, const std::string& key) const;
  void Checked(int64_t holder_id, std::string key);
  // Ends a save: forgets the chunks of holders other than `holder_ids` (those
  // it shared chunks of).
  void EndSave(const std::set<int64_t>& holder_ids);

 private:
  mutable std::mutex mu_;
  uint64_t saves_ = 0;
  // By holder: the save from which each checked chunk is due again.
  std::map<int64_t, std::unordered_map<std::string, uint64_t>> by_holder_;
};

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
  // The stored chunks already checked before being shared (null: check each).
  CheckedChunks* checked = nullptr;
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
