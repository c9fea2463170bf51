// A read-write open's repair of chunk table files from the copies of their
// chunk locations (copies/<id>.loc): a table RocksDB no longer holds (a
// rebuild set it aside as unreadable) and a live one whose bytes fail their
// checksums are written again and ingested in their place, so that every
// chunk has both of its locators again and incremental saves share it.
#include <rocksdb/db.h>
#include <rocksdb/sst_file_reader.h>
#include <rocksdb/sst_file_writer.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "storage/chunk_files.h"
#include "storage/column_families.h"
#include "storage/ingester.h"
#include "storage/keys.h"
#include "storage/record_copies.h"
#include "storage/staged_file_writer.h"
#include "storage/store_impl.h"
#include "storage/value_files.h"

namespace ckptdb::storage {
namespace {

constexpr const char* kRestoredPrefix = "restored-";

}  // namespace

Status StoreImpl::RestoreChunkTables() {
  // The live chunk tables by the key range and locations their own
  // properties record (a table RocksDB ingested without its key range, as
  // it may ingest one whose first block is damaged, is found by them too).
  rocksdb::TablePropertiesCollection tables;
  CKPTDB_RETURN_IF_ERROR(FromRocks(
      db_->GetPropertiesOfAllTables(chunks_, &tables),
      "reading the chunk table files' properties of '" + path_ + "'"));
  struct LiveTable {
    std::string path, blob;
  };
  std::map<std::pair<std::string, std::string>, LiveTable> live;
  for (const auto& [path, props] : tables) {
    std::optional<std::string> blob = LocatorBlob(*props);
    if (!blob) continue;  // written before chunk locations were kept
    const std::optional<ChunkLocations> located = ParseLocatorBlob(*blob);
    if (located)
      live[{located->first, located->last}] = {path, std::move(*blob)};
  }
  const std::set<std::string> damaged = DamagedChunkTables();
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> located,
                          CopyIds(CopyKind::kLocators));
  // The checkpoints whose chunks a committed checkpoint still reads: the
  // copy of one whose deletion began (its tables dropped first) is stale,
  // not damage.
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> needed, ReferencedIds());
  {
    const std::optional<CommitJournal> journal = catalogue_.journal();
    CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> records, RecordIds());
    for (int64_t id : records) {
      if (!journal || journal->committed.contains(id)) needed.insert(id);
    }
  }
  // The locations a table set aside records in its own properties: the copy
  // may lack them (damaged too, or written again from the live tables alone
  // by RepairCopies).
  std::map<int64_t, CopyEntries> aside = SetAsideLocations();
  std::set<int64_t> ids = located;
  for (const auto& [id, entries] : aside) ids.insert(id);
  std::optional<std::map<int64_t, StoredChunks>> stored;
  for (int64_t id : ids) {
    if (!needed.contains(id)) continue;
    Result<CopyEntries> copy =
        located.contains(id) ? ReadCopy(*fs_, path_, CopyKind::kLocators, id)
                             : Result<CopyEntries>(CopyEntries());
    if (!copy.ok()) copy = CopyEntries();  // RepairCopies rewrote what it could
    for (auto& entry : aside[id]) {
      const std::optional<ChunkLocations> set_aside =
          ParseLocatorBlob(entry.second);
      // Not where a live table or the copy already places chunks (a table
      // written again without its lost chunks has a narrower range).
      auto overlaps = [&](const std::string& first, const std::string& last) {
        return first <= set_aside->last && set_aside->first <= last;
      };
      bool placed = false;
      for (const auto& [range, table] : live)
        placed |= overlaps(range.first, range.second);
      for (const auto& [first, blob] : *copy) {
        const std::optional<ChunkLocations> in_copy = ParseLocatorBlob(blob);
        placed |= in_copy && overlaps(in_copy->first, in_copy->last);
      }
      if (!placed) copy->push_back(std::move(entry));
    }
    if (copy->empty()) continue;
    bool rewrite_copy = false;
    for (size_t k = 0; k < copy->size(); ++k) {
      const std::string& blob = (*copy)[k].second;
      const std::optional<ChunkLocations> locations = ParseLocatorBlob(blob);
      if (!locations) continue;
      const auto table = live.find({locations->first, locations->last});
      std::string replaced;
      if (table != live.end()) {
        if (!damaged.contains(table->second.path)) {
          // A copy written before its table was replaced (an open cut short
          // between the two) places the chunks where the table no longer
          // does.
          rewrite_copy |= table->second.blob != blob;
          continue;
        }
        replaced = table->second.path;
      }
      if (!stored) {
        CKPTDB_ASSIGN_OR_RETURN(stored, ChunksByHolder());
      }
      const Status restored =
          RestoreChunkTable(id, k, *locations, (*stored)[id], replaced);
      if (restored.ok()) {
        rewrite_copy = true;
        continue;
      }
      // Reads keep using the copy: the store works as it did, and the next
      // read-write open tries again.
      rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL,
                   db_->GetDBOptions().info_log,
                   "[ckptdb] rewriting a chunk table file of checkpoint %lld "
                   "from the copy of its chunk locations failed: %s",
                   static_cast<long long>(id), restored.ToString().c_str());
    }
    if (!rewrite_copy) continue;
    CKPTDB_RETURN_IF_ERROR(RewriteLocatorCopy(id, *copy));
    files_->Forget(id);
  }
  return Status::OK();
}

std::map<int64_t, CopyEntries> StoreImpl::SetAsideLocations() {
  rocksdb::Options options;
  static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
  options.env = env_.get();
  std::map<int64_t, CopyEntries> out;
  for (const std::string& path : SetAsideTables()) {
    rocksdb::SstFileReader reader(options);
    if (!reader.Open(path).ok()) continue;  // its properties unreadable
    std::optional<std::string> blob = LocatorBlob(*reader.GetTableProperties());
    if (!blob) continue;
    const std::optional<ChunkLocations> located = ParseLocatorBlob(*blob);
    int64_t id = 0;
    if (!located || !DecodeCheckpointId(located->first, &id)) continue;
    CopyEntries& entries = out[id];
    // A file set aside twice (an earlier repair's and a rebuild's) counts once.
    const bool seen =
        std::any_of(entries.begin(), entries.end(),
                    [&](const auto& entry) { return entry.second == *blob; });
    if (!seen) entries.emplace_back(located->first, std::move(*blob));
  }
  return out;
}

Status StoreImpl::RewriteLocatorCopy(int64_t id, const CopyEntries& earlier) {
  CKPTDB_ASSIGN_OR_RETURN(const rocksdb::TablePropertiesCollection tables,
                          ChunkTablesOf(id, "the chunk locations"));
  CopyEntries entries;
  std::vector<std::pair<std::string, std::string>> ranges;
  for (const auto& [table, props] : tables) {
    std::optional<std::string> blob = LocatorBlob(*props);
    if (!blob) continue;  // a file written before chunk locations were kept
    std::optional<ChunkLocations> located = ParseLocatorBlob(*blob);
    if (!located) continue;
    ranges.emplace_back(located->first, located->last);
    entries.emplace_back(located->first, std::move(*blob));
  }
  // The locations of a table still outside the database (its rewrite failed)
  // are the only ones its chunks have.
  for (const auto& [first, blob] : earlier) {
    const std::optional<ChunkLocations> located = ParseLocatorBlob(blob);
    if (!located) continue;
    const bool held =
        std::any_of(ranges.begin(), ranges.end(), [&](const auto& range) {
          return located->first <= range.first && range.second <= located->last;
        });
    if (!held) entries.emplace_back(first, blob);
  }
  std::sort(entries.begin(), entries.end());
  return WriteEncodedCopy(*fs_, path_, CopyKind::kLocators, id,
                          copy_encoder_.Encode(CopyKind::kLocators, entries));
}

Result<std::map<int64_t, StoreImpl::StoredChunks>> StoreImpl::ChunksByHolder() {
  std::map<int64_t, StoredChunks> out;
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> ids, RecordIds());
  for (int64_t id : ids) {
    // As ReadMetadata reads (without its lock: the open or reopen holds it).
    Result<CheckpointMetadata> meta = ReadRocksMetadata(id, nullptr);
    if (meta.status().IsCorruption()) meta = MetadataFromCopy(id, nullptr);
    if (!meta.ok()) continue;  // the open reports a record lost in both copies
    for (const auto& [key, tensor] : meta->tensors) {
      for (const ChunkMetadata& chunk : tensor.chunks) {
        const int64_t holder = chunk.holder_id != 0 ? chunk.holder_id : id;
        out[holder].try_emplace(
            EncodeChunkKey(holder, chunk.writer_rank, key, chunk.box.origin),
            StoredChunk{key, chunk});
      }
    }
  }
  return out;
}

Status StoreImpl::RestoreChunkTable(int64_t id, size_t table,
                                    const ChunkLocations& locations,
                                    const StoredChunks& chunks,
                                    const std::string& replaced) {
  const std::string what = "rewriting the chunk table file of checkpoint " +
                           std::to_string(id) + " from " +
                           CopyPath(path_, CopyKind::kLocators, id);
  // Where a small chunk's bytes are: the damaged table itself, or the tables
  // a rebuild set aside.
  std::vector<std::string> sources =
      replaced.empty() ? TablesWithRange(locations.first, locations.last)
                       : std::vector<std::string>{replaced};
  std::optional<ValuePointer> value_file;
  if (!locations.value_file.empty()) {
    int64_t named = 0;
    value_file = ParseValueFileName(locations.value_file, &named);
    if (!value_file || named != id) {
      return Status::Corruption(what + ": it names the value file '" +
                                locations.value_file + "'");
    }
  }
  rocksdb::Options options;
  static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
  options.env = env_.get();
  auto log = std::make_shared<ValueFileLog>();
  log->name = locations.value_file;
  options.table_properties_collector_factories = {
      NewValueOffsetCollectorFactory(log)};
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options,
                                /*column_family=*/nullptr,
                                /*invalidate_page_cache=*/false);
  CKPTDB_RETURN_IF_ERROR(fs_->CreateDirIfMissing(StagingDir(path_)));
  const std::string staged = StagingDir(path_) + "/" + kRestoredPrefix +
                             std::to_string(id) + "-" + std::to_string(table) +
                             ".sst";
  CKPTDB_RETURN_IF_ERROR(fs_->Remove(staged));
  CKPTDB_RETURN_IF_ERROR(FromRocks(writer.Open(staged), what));
  size_t entries = 0;
  Status s;
  for (auto it = chunks.lower_bound(locations.first);
       s.ok() && it != chunks.end() && it->first <= locations.last; ++it) {
    const auto& [key, stored] = *it;
    const std::optional<std::pair<bool, uint64_t>> at = locations.Find(key);
    if (!at) continue;
    std::string value;
    ChunkBuffer bytes;
    if (at->first) {
      if (!value_file) continue;
      ValuePointer pointer = *value_file;
      pointer.offset = at->second;
      pointer.nbytes = stored.chunk.nbytes;
      log->end = std::max(log->end, pointer.offset + pointer.nbytes);
      log->next_offset = pointer.offset;
      log->next_is_pointer = true;
      value = EncodeValuePointer(pointer);
    } else {
      const std::string chunk_what =
          "chunk of tensor '" + stored.tensor_key + "' at offset " +
          ShapeToString(stored.chunk.box.origin) + " (checkpoint id " +
          std::to_string(id) + ")";
      bool read = false;
      for (size_t i = 0; i < sources.size() && !read; ++i) {
        read = ReadAtCopiedPlace(sources[i], chunk_what, at->second,
                                 stored.chunk, &bytes)
                   .ok();
        // The file that held this chunk likely holds the next ones.
        if (read)
          std::rotate(sources.begin(), sources.begin() + i,
                      sources.begin() + i + 1);
      }
      // Bytes that read wrong everywhere stay lost: reads report the chunk.
      if (!read) continue;
      value = std::string(bytes.bytes());
    }
    s = FromRocks(writer.Put(key, value), what);
    log->next_is_pointer = false;
    ++entries;
  }
  if (s.ok() && entries == 0) s = Status::NotFound(what + ": no chunk to put");
  if (s.ok()) s = FromRocks(writer.Finish(), what);
  if (!s.ok()) {
    (void)fs_->Remove(staged);
    return s;
  }
  if (!replaced.empty()) {
    // Kept beside the other damaged files, where reads through the copy find
    // its chunks if the open stops before the new table is ingested.
    CKPTDB_ASSIGN_OR_RETURN(const std::string aside,
                            NewDamagedDir(*fs_, path_));
    const std::string name = std::filesystem::path(replaced).filename();
    CKPTDB_RETURN_IF_ERROR(
        FromRocks(fs_->LinkFile(replaced, aside + "/" + name,
                                rocksdb::IOOptions(), nullptr),
                  what));
    CKPTDB_RETURN_IF_ERROR(fs_->SyncDir(aside));
    CKPTDB_RETURN_IF_ERROR(FromRocks(db_->DeleteFile("/" + name), what));
  }
  return Ingester().IngestUnscanned(staged).WithContext(what);
}

}  // namespace ckptdb::storage
