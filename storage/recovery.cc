#include "storage/recovery.h"

#include <algorithm>

namespace ckptdb::storage {

Recovery PlanRecovery(const std::optional<CommitJournal>& journal,
                      const std::set<int64_t>& records,
                      const std::set<int64_t>& live,
                      const std::set<int64_t>& referenced) {
  Recovery out;
  CommitJournal& next = out.journal;
  if (journal) {
    next = *journal;
  } else {
    for (int64_t id : records) next.high_water = std::max(next.high_water, id);
    if (!live.empty())
      next.high_water = std::max(next.high_water, *live.rbegin());
  }
  for (int64_t id : records) {
    if (next.deleting.contains(id)) {
      out.records_to_delete.push_back(id);
    } else {
      next.committed.insert(id);
      next.high_water = std::max(next.high_water, id);
    }
  }
  for (int64_t id : live) {
    if (next.committed.contains(id) || referenced.contains(id)) continue;
    if (id > next.high_water || next.deleting.contains(id))
      out.chunks_to_drop.push_back(id);
  }
  next.deleting.clear();
  out.journal_changed = !journal || next != *journal;
  return out;
}

}  // namespace ckptdb::storage
