// A commit journal older than the database: copies put back from a backup
// taken before later saves and deletes.
#include <rocksdb/env.h>

#include "storage/store_impl.h"

namespace ckptdb::storage {

bool StoreImpl::AdoptDeletionsAfterStaleJournal(
    const std::set<int64_t>& records, const std::set<int64_t>& lost) {
  // A record above the journal's high-water mark committed after the journal
  // was last written (a commit writes its record before the journal): the
  // journal is older than the database. A database that lost its latest
  // edits (a cut MANIFEST, a damaged log) is older than the journal instead,
  // and has no such record.
  const std::optional<CommitJournal> journal = catalogue_.journal();
  if (!journal || records.empty() || *records.rbegin() <= journal->high_water)
    return false;
  // Each checkpoint the journal lists and the database lacks must look
  // deleted: none of its chunks is left, unless a remaining checkpoint
  // shares them. Records lost with their chunks kept are damage.
  const std::set<int64_t> live = LiveChunkIds();
  Result<std::set<int64_t>> referenced = ReferencedIds();
  if (!referenced.ok()) return false;
  for (int64_t id : lost) {
    if (live.contains(id) && !referenced->contains(id)) return false;
  }
  catalogue_.ForgetCommitted(lost);
  std::string ids;
  for (int64_t id : lost) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
  if (db_) {
    rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL,
                 db_->GetDBOptions().info_log,
                 "the commit journal %s is older than the database (high-water "
                 "mark %lld, records up to id %lld): checkpoint id(s) %s were "
                 "deleted since it was written",
                 JournalPaths(path_)[0].c_str(),
                 static_cast<long long>(journal->high_water),
                 static_cast<long long>(*records.rbegin()), ids.c_str());
  }
  return true;
}

}  // namespace ckptdb::storage
