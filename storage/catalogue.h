#pragma once

// The checkpoint catalogue: which checkpoints a store holds and how callers
// name them. It keeps the commit journal as last read or written (what is
// committed, what is being deleted, the high-water mark of ids) and makes the
// decisions over a listing of the records: visibility, selector resolution,
// tag uniqueness and the next checkpoint id. The records themselves are read
// by the store (StoreImpl::VisibleInfos, RecordIds). Private to storage/.

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "storage/commit_journal.h"
#include "storage/file_system.h"

namespace ckptdb::storage {

// Thread-safe: written by collective calls (a commit, a delete, an open) and
// read by local calls on other threads.
class CheckpointCatalogue {
 public:
  explicit CheckpointCatalogue(std::string store_path)
      : path_(std::move(store_path)) {}

  // ---- The journal ----
  // The journal as last read or written; nullopt for a store without one (a
  // read-only handle on a store written before journals).
  std::optional<CommitJournal> journal() const;
  // Journal copies found damaged by the last read (the other one is in use).
  std::vector<std::string> damaged_copies() const;
  // Takes the journal as read from disk (ReadJournal).
  void Adopt(JournalState state);
  // The damaged copies were rewritten.
  void ClearDamagedCopies();
  // Writes `next`, with a sequence one above the current journal's, to both
  // copies through `fs` (WriteJournal); it is then the current journal.
  Status Save(StoreFileSystem& fs, CommitJournal next);
  // Drops `ids` from the journal's committed checkpoints (a journal older
  // than the database, whose deletions it missed).
  void ForgetCommitted(const std::set<int64_t>& ids);

  // False for a checkpoint whose deletion began (its record may remain).
  bool Visible(int64_t checkpoint_id) const;
  // Whether the journal names `checkpoint_id` committed.
  bool Committed(int64_t checkpoint_id) const;

  // ---- Decisions over a listing (the visible records' infos, by id) ----
  // The id `which` selects: the latest match (several checkpoints may share a
  // step). NotFound naming the selector and the store otherwise.
  Result<int64_t> Resolve(const std::vector<CheckpointInfo>& listing,
                          const CheckpointSelector& which) const;
  // InvalidArgument naming the checkpoint when `tag` names one already.
  Status CheckTagFree(const std::vector<CheckpointInfo>& listing,
                      const std::string& tag) const;
  // Above every id the journal, a record (`records`) or a chunk file (`live`)
  // ever used: an id is never reused, so chunks above the high-water mark are
  // provably leftovers.
  int64_t NextId(const std::set<int64_t>& live,
                 const std::set<int64_t>& records) const;

 private:
  const std::string path_;
  mutable std::mutex mu_;
  std::optional<CommitJournal> journal_;
  std::vector<std::string> damaged_;
};

}  // namespace ckptdb::storage
