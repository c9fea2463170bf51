// The second copies of a store's metadata (record_copies.h): reads that fall
// back to them, the comparison a check and a read-write open run, and the
// repair that rewrites a damaged copy from the intact one. The rebuild of a
// database RocksDB cannot open is in store_rebuild.cc.
#include <fcntl.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/utilities/options_util.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <set>

#include "core/checksum.h"
#include "core/text.h"
#include "storage/chunk_files.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"
#include "storage/store_impl.h"

namespace ckptdb::storage {
namespace {

// The record entry of `entries` (a checkpoint's records) under `key`.
const std::string* FindEntry(const CopyEntries& entries,
                             const std::string& key) {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

}  // namespace

Result<std::optional<std::string>> StoreImpl::EncodeLocatorCopy(
    int64_t checkpoint_id) {
  CKPTDB_ASSIGN_OR_RETURN(rocksdb::TablePropertiesCollection tables,
                          ChunkTablesOf(checkpoint_id, "the chunk locations"));
  CopyEntries entries;
  for (const auto& [table, props] : tables) {
    std::optional<std::string> blob = LocatorBlob(*props);
    if (!blob) continue;  // a file written before chunk locations were kept
    std::optional<ChunkLocations> located = ParseLocatorBlob(*blob);
    if (!located) continue;
    entries.emplace_back(located->first, std::move(*blob));
  }
  if (entries.empty()) return std::optional<std::string>();
  std::sort(entries.begin(), entries.end());
  return std::optional<std::string>(
      copy_encoder_.Encode(CopyKind::kLocators, entries));
}

Status StoreImpl::WriteLocatorCopy(int64_t checkpoint_id) {
  CKPTDB_ASSIGN_OR_RETURN(const std::optional<std::string> encoded,
                          EncodeLocatorCopy(checkpoint_id));
  if (!encoded) return Status::OK();
  return WriteEncodedCopy(*fs_, path_, CopyKind::kLocators, checkpoint_id,
                          *encoded);
}

Status StoreImpl::RemoveCopy(CopyKind kind, int64_t checkpoint_id) {
  const std::string path = CopyPath(path_, kind, checkpoint_id);
  CKPTDB_ASSIGN_OR_RETURN(const std::optional<uint64_t> size,
                          fs_->SizeIfPresent(path));
  if (!size) return Status::OK();
  // Not made durable by a directory sync: the journal that no longer names
  // the checkpoint is written first, and a copy a crash brings back is of no
  // committed checkpoint, so the next read-write open removes it as stale.
  return fs_->Remove(path);
}

Result<std::set<int64_t>> StoreImpl::CopyIds(CopyKind kind) {
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                          fs_->ListDir(CopiesDir(path_)));
  std::set<int64_t> ids;
  for (const std::string& name : names) {
    int64_t id = 0;
    CopyKind found;
    if (ParseCopyName(name, &id, &found) && found == kind) ids.insert(id);
  }
  return ids;
}

Result<CopyEntries> StoreImpl::ReadRocksRecords(int64_t checkpoint_id) {
  const std::string end = MetaRangeEnd(checkpoint_id);
  rocksdb::Slice upper(end);
  rocksdb::ReadOptions read;
  read.iterate_upper_bound = &upper;
  read.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, meta_));
  CopyEntries entries;
  for (it->Seek(MetaKey(checkpoint_id)); it->Valid(); it->Next())
    entries.emplace_back(it->key().ToString(), it->value().ToString());
  CKPTDB_RETURN_IF_ERROR(FromRocks(
      it->status(),
      "reading the records of checkpoint " + std::to_string(checkpoint_id)));
  if (entries.empty() || entries.front().first != MetaKey(checkpoint_id)) {
    return Status::NotFound("the meta column family of '" + path_ +
                            "' holds no record of checkpoint " +
                            std::to_string(checkpoint_id));
  }
  return entries;
}

Status StoreImpl::ForEachCopiedRecord(
    const std::set<int64_t>& seen, const Status& scanned,
    const std::function<bool(int64_t, std::string_view)>& fn) {
  // Which ids may be committed: the journal's, or (a store written before
  // journals) any.
  const std::optional<CommitJournal> journal = catalogue_.journal();
  bool missed = false;
  if (journal) {
    for (int64_t id : journal->committed) missed |= !seen.contains(id);
  }
  if (scanned.ok() && !missed) return Status::OK();
  Result<std::set<int64_t>> ids = CopyIds(CopyKind::kRecords);
  if (!ids.ok()) return scanned.ok() ? ids.status() : scanned;
  const std::set<int64_t> copied = *ids;
  if (!scanned.ok() && journal) {
    // The scan stopped at damage: a committed checkpoint it did not reach
    // and that has no copy is read from the database on its own, or is that
    // damage's, not a lost one (a database put back whole scans without
    // error).
    for (int64_t id : journal->committed) {
      if (!seen.contains(id)) ids->insert(id);
    }
  }
  if (!scanned.ok() && ids->empty()) return scanned;
  for (int64_t id : *ids) {
    if (seen.contains(id)) continue;
    // A copy left by a delete cut short is no checkpoint.
    if (journal && !journal->committed.contains(id) &&
        id <= journal->high_water)
      continue;
    rocksdb::PinnableSlice record;
    // A copy that cannot be read, or none, still names a checkpoint: its
    // record reads as damaged (empty), the error of the calls that need it.
    const bool read =
        copied.contains(id)
            ? MainRecordFromCopy(id, &record).ok()
            : db_->Get(rocksdb::ReadOptions(), meta_, MetaKey(id), &record)
                  .ok();
    if (!read) record.PinSelf("");
    if (!fn(id, std::string_view(record.data(), record.size())))
      return Status::OK();
  }
  return Status::OK();
}

Status StoreImpl::MainRecordFromCopy(int64_t checkpoint_id,
                                     rocksdb::PinnableSlice* record) {
  CKPTDB_ASSIGN_OR_RETURN(
      const CopyEntries entries,
      ReadCopy(*fs_, path_, CopyKind::kRecords, checkpoint_id));
  const std::string* main = FindEntry(entries, MetaKey(checkpoint_id));
  if (main == nullptr) {
    return Status::Corruption(
        "metadata copy " + CopyPath(path_, CopyKind::kRecords, checkpoint_id) +
        " holds no main record");
  }
  record->Reset();
  record->PinSelf(*main);
  return Status::OK();
}

Result<CheckpointMetadata> StoreImpl::MetadataFromCopy(
    int64_t checkpoint_id, const std::vector<std::string_view>* tensor_keys) {
  const std::string path = CopyPath(path_, CopyKind::kRecords, checkpoint_id);
  CKPTDB_ASSIGN_OR_RETURN(
      const CopyEntries entries,
      ReadCopy(*fs_, path_, CopyKind::kRecords, checkpoint_id));
  Result<CheckpointMetadata> meta = DecodeCheckpointRecords(entries);
  if (!meta.ok()) return meta.status().WithContext("metadata copy " + path);
  if (meta->info.id != checkpoint_id) {
    return Status::Corruption("metadata copy " + path + " claims id " +
                              std::to_string(meta->info.id));
  }
  if (tensor_keys != nullptr) {
    const std::set<std::string_view> wanted(tensor_keys->begin(),
                                            tensor_keys->end());
    for (auto& [key, tensor] : meta->tensors) {
      if (!wanted.contains(key)) tensor.chunks.clear();
    }
    meta->flat_mapping.clear();  // as the records' own reading leaves them
    meta->path_kinds.clear();
  }
  return meta;
}

Status StoreImpl::ReadThroughCopy(int64_t checkpoint_id,
                                  std::string_view tensor_key,
                                  const ChunkMetadata& chunk,
                                  const std::string& key, ChunkBuffer* buffer) {
  const int64_t holder = chunk.holder_id != 0 ? chunk.holder_id : checkpoint_id;
  CKPTDB_ASSIGN_OR_RETURN(const CopyEntries entries,
                          ReadCopy(*fs_, path_, CopyKind::kLocators, holder));
  std::optional<ChunkLocations> found;
  for (const auto& [first, blob] : entries) {
    std::optional<ChunkLocations> located = ParseLocatorBlob(blob);
    if (located && located->Holds(key)) {
      found = std::move(located);
      break;
    }
  }
  const std::string what = "chunk of tensor '" + std::string(tensor_key) +
                           "' at offset " + ShapeToString(chunk.box.origin) +
                           " (checkpoint id " + std::to_string(checkpoint_id) +
                           ")";
  const std::optional<std::pair<bool, uint64_t>> at =
      found ? found->Find(key) : std::nullopt;
  if (!at) {
    return Status::NotFound("the copy of the chunk locations of checkpoint " +
                            std::to_string(holder) + " has no " + what);
  }
  const std::vector<std::string> candidates =
      at->first
          ? std::vector<std::string>{ValuesDir(path_) + "/" + found->value_file}
          : TablesWithRange(found->first, found->last);
  Status read = Status::NotFound("no table file holds the " + what);
  for (const std::string& path : candidates) {
    read = ReadAtCopiedPlace(path, what, at->second, chunk, buffer);
    if (read.ok()) return read;
  }
  return read;
}

std::vector<std::string> StoreImpl::TablesWithRange(const std::string& first,
                                                    const std::string& last) {
  // The table file as RocksDB names it now (its number changes when a rebuild
  // ingests it again), the one with the recorded key range.
  std::vector<rocksdb::LiveFileMetaData> files;
  db_->GetLiveFilesMetaData(&files);
  std::vector<std::string> out;
  for (const auto& f : files) {
    if (f.column_family_name == kChunksCf && f.smallestkey == first &&
        f.largestkey == last)
      out.push_back(f.db_path + f.name);
  }
  if (!out.empty()) return out;
  // Else one set aside by a rebuild, or on disk but unknown to RocksDB (a
  // MANIFEST that lost the edit adding it).
  std::set<std::string> known;
  for (const auto& f : files) known.insert(f.db_path + f.name);
  out = SetAsideTables();
  Result<std::vector<std::string>> names = fs_->ListDir(path_);
  for (const std::string& name :
       names.ok() ? *names : std::vector<std::string>()) {
    const std::string table = path_ + "/" + name;
    if (name.ends_with(".sst") && !known.contains(table)) out.push_back(table);
  }
  return out;
}

std::vector<std::string> StoreImpl::SetAsideTables() {
  std::vector<std::string> out;
  const std::string root = DamagedDir(path_);
  Result<std::vector<std::string>> dirs = fs_->ListDir(root);
  if (!dirs.ok()) return out;
  for (const std::string& dir : *dirs) {
    Result<std::vector<std::string>> names = fs_->ListDir(root + "/" + dir);
    if (!names.ok()) continue;
    for (const std::string& name : *names) {
      if (name.ends_with(".sst")) out.push_back(root + "/" + dir + "/" + name);
    }
  }
  return out;
}

Status StoreImpl::ReadAtCopiedPlace(const std::string& path,
                                    const std::string& what, uint64_t offset,
                                    const ChunkMetadata& chunk,
                                    ChunkBuffer* buffer) {
  Result<int> opened = fs_->OpenForDirectRead(path, " to read the " + what);
  // A missing file is an I/O error here: the copy says a file is there.
  if (opened.status().IsNotFound())
    return Status::IOError(opened.status().message());
  CKPTDB_ASSIGN_OR_RETURN(const int fd, opened);
  ValuePointer pointer;
  pointer.offset = offset;
  pointer.nbytes = chunk.nbytes;
  *buffer = ChunkBuffer();
  Status read = files_->ReadValueFile(fd, path, what, pointer, buffer);
  ::close(fd);
  CKPTDB_RETURN_IF_ERROR(read);
  const std::string_view bytes = buffer->bytes();
  if (ChunkChecksum(bytes.data(), bytes.size()) != chunk.checksum) {
    return Status::Corruption("the " + what + " is damaged (in " + path +
                              "): checksum mismatch");
  }
  return Status::OK();
}

Result<CopyFindings> StoreImpl::CompareCopies() {
  CopyFindings out;
  out.predates_copies =
      fs_->FileExists(CopiesDir(path_), rocksdb::IOOptions(), nullptr)
          .IsNotFound();
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> ids,
                          CompareRecordCopies(&out));
  ScanMetaFamily(&out);
  CKPTDB_RETURN_IF_ERROR(CompareLocatorCopies(ids, &out));
  return out;
}

// The records of every checkpoint with records or a copy of them, against
// that copy; returns those ids.
Result<std::set<int64_t>> StoreImpl::CompareRecordCopies(CopyFindings* found) {
  CopyFindings& out = *found;
  const std::optional<CommitJournal> journal = catalogue_.journal();
  auto maybe_committed = [&](int64_t id) {
    return !journal || journal->committed.contains(id) ||
           (id > journal->high_water && !journal->deleting.contains(id));
  };
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> ids, RecordIds());
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> copied,
                          CopyIds(CopyKind::kRecords));
  for (int64_t id : copied) {
    // A read-only open sees the database as it was when it opened, and the
    // copies as they are now: a copy above the journal's high-water mark
    // without a record is of a commit made since, outside this view.
    // (Records are written before their copy, so in a read-write open the
    // missing record is damage.)
    if (options_.read_only && journal && id > journal->high_water &&
        !ids.contains(id))
      continue;
    ids.insert(id);
  }
  for (int64_t id : ids) {
    if (journal && journal->deleting.contains(id)) continue;
    Result<CopyEntries> rocks = ReadRocksRecords(id);
    Result<CopyEntries> copy = ReadCopy(*fs_, path_, CopyKind::kRecords, id);
    // An I/O error says nothing of a copy's contents: the caller fails.
    if (rocks.status().IsIOError()) return rocks.status();
    if (copy.status().IsIOError()) return copy.status();
    const std::string copy_path = CopyPath(path_, CopyKind::kRecords, id);
    if (rocks.ok() && copy.ok()) {
      if (*rocks != *copy) {
        out.copies_damaged[id] =
            copy_path + " differs from the records in the meta column family";
      }
    } else if (rocks.ok()) {
      if (copy.status().IsNotFound() &&
          MissingCopyIsOutsideTheView(id, CopyKind::kRecords))
        continue;
      out.copies_damaged[id] = copy.status().IsNotFound()
                                   ? copy_path + " is missing"
                                   : copy.status().message();
    } else if (copy.ok()) {
      if (!rocks.status().IsNotFound() || maybe_committed(id)) {
        out.records_damaged[id] = rocks.status().message();
      } else {
        out.stale.push_back(copy_path);
      }
    } else if (!copy.status().IsNotFound() || maybe_committed(id)) {
      out.both_damaged[id] =
          rocks.status().message() + "; " + copy.status().message();
    }
  }
  return ids;
}

bool StoreImpl::MissingCopyIsOutsideTheView(int64_t checkpoint_id,
                                            CopyKind kind) {
  if (!options_.read_only) return false;
  Result<JournalState> now = ReadJournal(*fs_, path_);
  if (!now.ok() || !now->journal) return false;
  const std::optional<CommitJournal> view = catalogue_.journal();
  const bool named_now = now->journal->committed.contains(checkpoint_id);
  // A delete writes the journal without the checkpoint (and with the
  // checkpoints whose chunks it frees in `deleting`) before it removes their
  // files.
  if (!named_now && (!view || *now->journal != *view)) return true;
  // A commit ingests its chunk tables, writes its records, then the copies
  // of their locations and of the records, and only then the journal naming
  // it: a view taken in between holds what comes before a copy not yet
  // written.
  const bool under_way = view && !view->committed.contains(checkpoint_id) &&
                         checkpoint_id > view->high_water;
  if (!under_way) return false;
  if (!named_now) return true;
  // Named by the journal since the view: its copy was written before that.
  return fs_
      ->FileExists(CopyPath(path_, kind, checkpoint_id), rocksdb::IOOptions(),
                   nullptr)
      .ok();
}

// Reads the whole meta column family and its store marker: damage outside
// any checkpoint's records.
void StoreImpl::ScanMetaFamily(CopyFindings* found) {
  CopyFindings& out = *found;
  rocksdb::ReadOptions read;
  read.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, meta_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
  }
  if (!it->status().ok()) {
    out.meta_scan_error =
        FromRocks(it->status(), "reading the meta column family").message();
  }
  std::string marker;
  if (out.meta_scan_error.empty() &&
      (!db_->Get(read, meta_, kStoreMarkerKey, &marker).ok() ||
       marker != kStoreMarker))
    out.meta_scan_error = "the store marker is missing or damaged";
}

// The copies of chunk locations against the table files of the live
// checkpoints; copies of nothing and temporary copies are stale.
Status StoreImpl::CompareLocatorCopies(const std::set<int64_t>& ids,
                                       CopyFindings* found) {
  CopyFindings& out = *found;
  const std::set<int64_t> live = LiveChunkIds();
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> located,
                          CopyIds(CopyKind::kLocators));
  for (int64_t id : live) {
    Result<CopyEntries> copy = ReadCopy(*fs_, path_, CopyKind::kLocators, id);
    if (copy.ok()) continue;
    if (copy.status().IsIOError()) return copy.status();
    if (copy.status().IsNotFound()) {
      if (MissingCopyIsOutsideTheView(id, CopyKind::kLocators)) continue;
      // Only files that keep their chunk locations can have a copy of them.
      const std::string begin = CheckpointKeyPrefix(id);
      const std::string end = CheckpointKeyEnd(id);
      const rocksdb::Range range(begin, end);
      rocksdb::TablePropertiesCollection tables;
      bool any = false;
      if (db_->GetPropertiesOfTablesInRange(chunks_, &range, 1, &tables).ok()) {
        for (const auto& [table, props] : tables)
          any |= LocatorBlob(*props).has_value();
      }
      if (!any) continue;
      out.locators_damaged[id] =
          CopyPath(path_, CopyKind::kLocators, id) + " is missing";
    } else {
      out.locators_damaged[id] = copy.status().message();
    }
  }
  // The locations of chunks that a record still uses stay, even when their
  // table file is gone (damage): reads of the value-file chunks use them.
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> referenced, ReferencedIds());
  for (int64_t id : located) {
    if (!live.contains(id) && !ids.contains(id) && !referenced.contains(id))
      out.stale.push_back(CopyPath(path_, CopyKind::kLocators, id));
  }
  CKPTDB_ASSIGN_OR_RETURN(const std::vector<std::string> names,
                          fs_->ListDir(CopiesDir(path_)));
  for (const std::string& name : names) {
    if (name.ends_with(".tmp"))
      out.stale.push_back(CopiesDir(path_) + "/" + name);
  }
  return Status::OK();
}

Status StoreImpl::RepairCopies() {
  // The chunk tables of a rebuild cut short, before anything else can take
  // them for leftovers.
  CKPTDB_RETURN_IF_ERROR(
      IngestRebuildTables(DamagedDir(path_) + "/unreadable"));
  CKPTDB_ASSIGN_OR_RETURN(const CopyFindings found, CompareCopies());
  for (const auto& [id, why] : found.copies_damaged) {
    CKPTDB_ASSIGN_OR_RETURN(const CopyEntries records, ReadRocksRecords(id));
    CKPTDB_RETURN_IF_ERROR(
        WriteCopy(*fs_, path_, CopyKind::kRecords, id, records));
  }
  if (!found.records_damaged.empty() || !found.meta_scan_error.empty())
    CKPTDB_RETURN_IF_ERROR(RewriteMetaFamily());
  for (const auto& [id, why] : found.locators_damaged)
    CKPTDB_RETURN_IF_ERROR(WriteLocatorCopy(id));
  CKPTDB_RETURN_IF_ERROR(RestoreChunkTables());
  for (const std::string& stale : found.stale)
    CKPTDB_RETURN_IF_ERROR(fs_->Remove(stale));
  return Status::OK();
}

Status StoreImpl::RewriteMetaFamily() {
  const std::string what =
      "rewriting the metadata of '" + path_ + "' from its copies";
  memo_.ForgetAll();
  // Whatever part of the rewrite happens, what the walk below found is stale.
  struct ForgetAtEnd {
    StoreImpl* store;
    ~ForgetAtEnd() { store->memo_.ForgetAll(); }
  } forget_at_end{this};
  const std::optional<CommitJournal> journal = catalogue_.journal();
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> ids, RecordIds());
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> copied,
                          CopyIds(CopyKind::kRecords));
  for (int64_t id : copied) {
    // A read-only open sees the database as it was when it opened, and the
    // copies as they are now: a copy above the journal's high-water mark
    // without a record is of a commit made since, outside this view.
    // (Records are written before their copy, so in a read-write open the
    // missing record is damage.)
    if (options_.read_only && journal && id > journal->high_water &&
        !ids.contains(id))
      continue;
    ids.insert(id);
  }
  // Every record, from its copy (written first, so that an interrupted
  // rewrite finds them all there) or from the column family.
  std::vector<CopyEntries> all;
  int64_t next = journal ? journal->high_water + 1 : 1;
  for (int64_t id : ids) {
    Result<CopyEntries> records = ReadCopy(*fs_, path_, CopyKind::kRecords, id);
    const Status copy_read = records.status();
    if (!records.ok()) records = ReadRocksRecords(id);
    // Nothing is dropped while an I/O error hides what a copy holds.
    if (copy_read.IsIOError()) return copy_read;
    if (records.status().IsIOError()) return records.status();
    if (!records.ok()) continue;  // lost in both: the open reports it
    next = std::max(next, id + 1);
    all.push_back(std::move(records).value());
  }
  {
    std::string stored;
    if (db_->Get(rocksdb::ReadOptions(), meta_, kNextIdKey, &stored).ok() &&
        stored.size() == 8)
      next =
          std::max(next, static_cast<int64_t>(GetBigEndian64(stored.data())));
  }
  // Dropping the column family takes its table files, damaged ones included,
  // out of the database.
  CKPTDB_RETURN_IF_ERROR(FromRocks(db_->DropColumnFamily(meta_), what));
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(db_->DestroyColumnFamilyHandle(meta_), what));
  // The dropped files' blocks would stay until newer ones pushed them out.
  meta_cache_->EraseUnRefEntries();
  meta_ = nullptr;
  handles_[2] = nullptr;
  rocksdb::ColumnFamilyHandle* handle = nullptr;
  CKPTDB_RETURN_IF_ERROR(FromRocks(
      db_->CreateColumnFamily(MetaCfOptions(meta_cache_), kMetaCf, &handle),
      what));
  meta_ = handles_[2] = handle;
  rocksdb::WriteBatch batch;
  for (const CopyEntries& records : all) {
    for (const auto& [key, value] : records) batch.Put(meta_, key, value);
  }
  PutStoreHeader(&batch, next);
  return WriteMeta(&batch, what);
}

void StoreImpl::ReportCopies(const CopyFindings& found, StoreReport* report) {
  const std::string repaired = ": a read-write open rewrites it from ";
  for (const auto& [id, why] : found.records_damaged) {
    report->repairable_metadata.push_back(
        "the records of checkpoint " + std::to_string(id) +
        " in the database are damaged or missing (" + why +
        "); reads use their intact copy " +
        CopyPath(path_, CopyKind::kRecords, id) + repaired + "that copy");
  }
  // A store written before copies were kept misses them all: not damage.
  const bool report_missing = !found.predates_copies;
  for (const auto& [id, why] : found.copies_damaged) {
    if (!report_missing && why.ends_with(" is missing")) continue;
    report->repairable_metadata.push_back(
        "the copy of the records of checkpoint " + std::to_string(id) +
        " is damaged (" + why + ")" + repaired + "the database's records");
  }
  if (!found.meta_scan_error.empty() && found.records_damaged.empty()) {
    report->repairable_metadata.push_back(
        "the metadata table files are damaged outside any checkpoint's "
        "records (" +
        found.meta_scan_error + ")" + repaired + "the copies of the records");
  }
  for (const auto& [id, why] : found.locators_damaged) {
    if (!report_missing && why.ends_with(" is missing")) continue;
    report->repairable_metadata.push_back(
        "the copy of the chunk locations of checkpoint " + std::to_string(id) +
        " is damaged (" + why + ")" + repaired + "its table files");
  }
  for (const auto& [id, why] : found.both_damaged) {
    report->lost_metadata.push_back(
        "both copies of the records of checkpoint " + std::to_string(id) +
        " are damaged: " + why);
  }
}

namespace {

std::string EncodeOptionsSums(const std::map<std::string, uint64_t>& sums) {
  std::string out;
  for (const auto& [name, sum] : sums) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(sum));
    out += name + "=" + hex + "\n";
  }
  return out;
}

// The sums kOptionsFilesKey records; none when it is absent or malformed
// (the metadata's own checks name a damaged record).
std::map<std::string, uint64_t> DecodeOptionsSums(std::string_view text) {
  std::map<std::string, uint64_t> out;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const size_t eq = text.find('=');
    if (end == std::string_view::npos || eq > end || end - eq != 17) return {};
    uint64_t sum = 0;
    const char* first = text.data() + eq + 1;
    auto [ptr, ec] = std::from_chars(first, first + 16, sum, 16);
    if (ec != std::errc() || ptr != first + 16) return {};
    out.emplace(std::string(text.substr(0, eq)), sum);
    text.remove_prefix(end + 1);
  }
  return out;
}

}  // namespace

StoreImpl::OptionsFiles StoreImpl::CheckOptionsFiles() {
  OptionsFiles out;
  Result<std::vector<std::string>> names = fs_->ListDir(path_);
  if (!names.ok()) {  // the checks beside this one name an unreadable directory
    out.any = true;
    return out;
  }
  std::sort(names->begin(), names->end());
  std::string recorded;
  if (db_->Get(rocksdb::ReadOptions(), meta_, kOptionsFilesKey, &recorded).ok())
    out.recorded = DecodeOptionsSums(recorded);
  const std::map<std::string, uint64_t>& sums = out.recorded;
  rocksdb::ConfigOptions config;
  config.env = env_.get();
  for (const std::string& name : *names) {
    // RocksDB's names only (OPTIONS-<number>), not a user's OPTIONS-notes.
    const std::string_view number = std::string_view(name).substr(
        std::min(name.size(), std::string_view("OPTIONS-").size()));
    if (!name.starts_with("OPTIONS-") || number.empty() ||
        !std::all_of(number.begin(), number.end(),
                     [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const std::string path = path_ + "/" + name;
    if (std::optional<std::string> kind =
            NotARegularFile(path, /*follow=*/false)) {
      out.not_files.emplace_back(path, *kind);
      continue;
    }
    rocksdb::DBOptions db_options;
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    const rocksdb::Status s =
        rocksdb::LoadOptionsFromFile(config, path, &db_options, &families);
    if (s.IsNotFound() || s.IsPathNotFound()) continue;  // a writer's rotation
    out.any = true;
    if (!s.ok()) {
      out.damaged.emplace_back(path, PrintableText(s.ToString()));
      continue;
    }
    std::string text;
    if (!rocksdb::ReadFileToString(env_.get(), path, &text).ok()) continue;
    // RocksDB ends every line with a newline; a flipped last byte parses
    // the same.
    if (!text.empty() && text.back() != '\n') {
      out.damaged.emplace_back(path, "it does not end with a newline");
      continue;
    }
    // Most flips (in a comment, a digit of a number) parse too.
    const uint64_t sum = ChunkChecksum(text.data(), text.size());
    const auto known = sums.find(name);
    if (known != sums.end() && known->second != sum) {
      out.damaged.emplace_back(
          path,
          "its bytes differ from those a read-write open found once "
          "RocksDB had written it");
      continue;
    }
    out.intact.emplace(name, sum);
  }
  return out;
}

void StoreImpl::KeepOptionsFiles() {
  const OptionsFiles files = CheckOptionsFiles();
  for (const auto& [path, why] : files.damaged) (void)fs_->Remove(path);
  if (files.intact == files.recorded) return;
  // In a table file of its own, as every metadata write (a commit's records
  // share theirs with no other key). Best effort: without the record, the
  // files are checked only for whether they parse.
  rocksdb::WriteBatch batch;
  batch.Put(meta_, kOptionsFilesKey, EncodeOptionsSums(files.intact));
  if (WriteMeta(&batch, "recording the checksums of the options files").ok())
    (void)CompactMetaIfDeep();
}

void StoreImpl::ReportOptionsFiles(StoreReport* report) {
  const OptionsFiles files = CheckOptionsFiles();
  for (const auto& [path, why] : files.damaged) {
    report->repairable_metadata.push_back(
        "the database's options file " + path + " is damaged (" + why +
        "); the database does not read it, and a read-write open removes it "
        "and writes a new one");
  }
  for (const auto& [path, kind] : files.not_files) {
    report->repairable_metadata.push_back(
        path + " is not a regular file (" + kind +
        ") where RocksDB keeps an options file; the database does not read "
        "it: remove it");
  }
  if (!files.any) {
    report->repairable_metadata.push_back(
        "the database's options file (" + path_ +
        "/OPTIONS-*) is missing; the database does not read it, and a "
        "read-write open writes a new one");
  }
}

}  // namespace ckptdb::storage
