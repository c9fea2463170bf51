#pragma once

// Recovery at a read-write open, as a decision over what the store holds:
// which checkpoints are committed once interrupted saves and deletes are
// settled, which records and chunks go, and the journal that says so. Pure:
// the store reads its inputs and carries the decision out
// (StoreImpl::RecoverCommits). Private to storage/.
//
// The rules, each provable from the inputs alone:
//   - a record whose deletion began (in the journal's `deleting`) loses its
//     record; every other record is committed, also one the journal does not
//     name yet (a save that died after its record and before the journal);
//   - chunks without a committed record go when their id is above the
//     high-water mark (that save never committed) or their deletion began,
//     unless a remaining record shares them (incremental saves); any other
//     such chunks are kept: nothing proves they never committed;
//   - without a journal (a store written before journals, or just created)
//     every record counts as committed and the high-water mark is the highest
//     id any record or chunk uses, so no chunk is dropped.

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "storage/commit_journal.h"

namespace ckptdb::storage {

struct Recovery {
  // Records to remove, in id order: their deletion began.
  std::vector<int64_t> records_to_delete;
  // Checkpoints whose chunks (table and value files) to remove, in id order.
  std::vector<int64_t> chunks_to_drop;
  // The journal once recovery is done: every remaining record committed,
  // nothing being deleted.
  CommitJournal journal;
  // Whether `journal` differs from the journal read (or there was none).
  bool journal_changed = false;
};

// `journal`: as read (and checked) at open; `records`: the ids with a main
// record; `live`: the ids some chunk table file holds keys of; `referenced`:
// the ids whose chunks a visible record shares.
Recovery PlanRecovery(const std::optional<CommitJournal>& journal,
                      const std::set<int64_t>& records,
                      const std::set<int64_t>& live,
                      const std::set<int64_t>& referenced);

}  // namespace ckptdb::storage
