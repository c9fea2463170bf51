#pragma once

// What a store handle remembers of the committed records between calls, so
// that it decodes each once: the checkpoints' infos, the ids of the records,
// and the main record a series of one-tensor reads decodes. Private to
// storage/.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "ckptdb/metadata.h"
#include "storage/metadata_codec.h"

namespace ckptdb::storage {

// A committed record never changes (an id is never given to another
// checkpoint once committed), so what is remembered of it stays true until
// the checkpoint is deleted (Removed) or the handle reopens or rewrites the
// records from their copies (ForgetAll). The records change only through this
// handle's commits and deletes (one writer; a read-only handle sees a fixed
// view until its Refresh reopens). Every change is counted, so that what a
// walk or a decode found beside a change is not kept. Thread-safe.
class RecordMemo {
 public:
  // ---- The infos of the main records, by id ----
  std::optional<CheckpointInfo> Info(int64_t checkpoint_id) const;
  void RememberInfo(const CheckpointInfo& info);
  void ForgetInfo(int64_t checkpoint_id);

  // ---- The ids of the records, as a walk of them found them ----
  // Every save and every listing needs them; a walk reads every main record of
  // the store, which for many checkpoints of many tensors is megabytes from
  // files each time. `changes` is set to the count of changes to pass to
  // RememberRecordIds after a walk.
  std::optional<std::set<int64_t>> RecordIds(uint64_t* changes) const;
  // Keeps `ids` unless the records changed since RecordIds gave `changes`.
  void RememberRecordIds(std::set<int64_t> ids, uint64_t changes);

  // ---- The main record one-tensor reads decode ----
  // Reading a checkpoint's tensors one by one decodes its record once, not
  // once a tensor (10,000 tensors: 5 ms a read). Only records of up to
  // kKeptDecodedRecordBytes (about 100,000 tensors) are kept, so that what a
  // handle keeps stays small beside the tensors it reads.
  static constexpr size_t kKeptDecodedRecordBytes = size_t{16} << 20;
  // The decoded main record of `checkpoint_id`, or null; `changes` as for
  // RecordIds.
  std::shared_ptr<const MainRecord> Decoded(int64_t checkpoint_id,
                                            uint64_t* changes) const;
  // Keeps `main`, decoded from `record_bytes` bytes, in place of the one kept
  // before, unless the records changed since Decoded gave `changes`.
  void RememberDecoded(std::shared_ptr<const MainRecord> main,
                       size_t record_bytes, uint64_t changes);

  // ---- Changes ----
  // This handle wrote the record of `checkpoint_id`, or deleted it.
  void Added(int64_t checkpoint_id);
  void Removed(int64_t checkpoint_id);
  // Forgets everything: the handle reopens, or rewrote the records.
  void ForgetAll();

 private:
  // ForgetInfo's work, with mu_ held.
  void ForgetLocked(int64_t checkpoint_id);

  mutable std::mutex mu_;
  std::map<int64_t, CheckpointInfo> infos_;
  std::optional<std::set<int64_t>> record_ids_;
  std::shared_ptr<const MainRecord> decoded_;
  uint64_t changes_ = 0;
};

}  // namespace ckptdb::storage
