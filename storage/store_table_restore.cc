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

// The chunk locations a table file's properties record: parsed, and as the
// blob a copy holds.
struct RecordedLocations {
  ChunkLocations at;
  std::string blob;
};
std::optional<RecordedLocations> RecordedIn(
    const rocksdb::TableProperties& props) {
  std::optional<std::string> blob = LocatorBlob(props);
  if (!blob) return std::nullopt;  // written before chunk locations were kept
  std::optional<ChunkLocations> at = ParseLocatorBlob(*blob);
  if (!at) return std::nullopt;
  return RecordedLocations{std::move(*at), std::move(*blob)};
}

}  // namespace

Status StoreImpl::RestoreChunkTables() {
  CKPTDB_ASSIGN_OR_RETURN(const LiveTables live, LiveTablesByRange());
  const std::set<std::string> damaged = DamagedChunkTables();
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> located,
                          CopyIds(CopyKind::kLocators));
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> needed, NeededChunkIds());
  // The locations a table set aside records in its own properties: the copy
  // may lack them (damaged too, or written again from the live tables alone
  // by RepairCopies).
  std::map<int64_t, CopyEntries> aside = SetAsideLocations();
  KeyRanges live_ranges;
  for (const auto& [range, table] : live) live_ranges.push_back(range);
  std::set<int64_t> ids = located;
  for (const auto& [id, entries] : aside) ids.insert(id);
  std::optional<std::map<int64_t, StoredChunks>> stored;
  for (int64_t id : ids) {
    if (!needed.contains(id)) continue;
    const CopyEntries copy =
        LocationsToRestore(id, located.contains(id), aside[id], live_ranges);
    bool rewrite_copy = false;
    for (size_t k = 0; k < copy.size(); ++k) {
      const std::string& blob = copy[k].second;
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
    CKPTDB_RETURN_IF_ERROR(RewriteLocatorCopy(id, copy));
    files_->Forget(id);
  }
  return Status::OK();
}

Result<StoreImpl::LiveTables> StoreImpl::LiveTablesByRange() {
  // By the key range their own properties record: RocksDB lists none for a
  // table whose first block could not be read when it was ingested.
  rocksdb::TablePropertiesCollection tables;
  CKPTDB_RETURN_IF_ERROR(FromRocks(
      db_->GetPropertiesOfAllTables(chunks_, &tables),
      "reading the chunk table files' properties of '" + path_ + "'"));
  LiveTables live;
  for (const auto& [path, props] : tables) {
    if (std::optional<RecordedLocations> recorded = RecordedIn(*props)) {
      live[{recorded->at.first, recorded->at.last}] = {
          path, std::move(recorded->blob)};
    }
  }
  return live;
}

Result<std::set<int64_t>> StoreImpl::NeededChunkIds() {
  // The copy of a checkpoint whose deletion began (its tables dropped first)
  // is stale, not damage.
  CKPTDB_ASSIGN_OR_RETURN(std::set<int64_t> needed, ReferencedIds());
  const std::optional<CommitJournal> journal = catalogue_.journal();
  CKPTDB_ASSIGN_OR_RETURN(const std::set<int64_t> records, RecordIds());
  for (int64_t id : records) {
    if (!journal || journal->committed.contains(id)) needed.insert(id);
  }
  return needed;
}

CopyEntries StoreImpl::LocationsToRestore(int64_t id, bool copied,
                                          CopyEntries aside,
                                          const KeyRanges& live) {
  Result<CopyEntries> read =
      copied ? ReadCopy(*fs_, path_, CopyKind::kLocators, id)
             : Result<CopyEntries>(CopyEntries());
  // A damaged copy: RepairCopies wrote again what the live tables hold.
  CopyEntries copy = read.ok() ? std::move(read).value() : CopyEntries();
  KeyRanges placed = live;
  for (const auto& [first, blob] : copy) {
    if (std::optional<ChunkLocations> at = ParseLocatorBlob(blob))
      placed.emplace_back(at->first, at->last);
  }
  for (auto& entry : aside) {
    const std::optional<ChunkLocations> at = ParseLocatorBlob(entry.second);
    if (!at) continue;
    // Not where a live table or the copy already places chunks (a table
    // written again without its lost chunks has a narrower range).
    const bool overlaps =
        std::any_of(placed.begin(), placed.end(), [&](const auto& range) {
          return range.first <= at->last && at->first <= range.second;
        });
    if (!overlaps) copy.push_back(std::move(entry));
  }
  return copy;
}

std::map<int64_t, CopyEntries> StoreImpl::SetAsideLocations() {
  std::map<int64_t, CopyEntries> out;
  for (const std::string& path : SetAsideTables()) {
    rocksdb::SstFileReader reader(TableFileOptions(kChunksCf));
    if (!reader.Open(path).ok()) continue;  // its properties unreadable
    std::optional<RecordedLocations> recorded =
        RecordedIn(*reader.GetTableProperties());
    int64_t id = 0;
    if (!recorded || !DecodeCheckpointId(recorded->at.first, &id)) continue;
    CopyEntries& entries = out[id];
    // A file set aside twice (an earlier repair's and a rebuild's) counts once.
    const bool seen = std::any_of(
        entries.begin(), entries.end(),
        [&](const auto& entry) { return entry.second == recorded->blob; });
    if (!seen)
      entries.emplace_back(recorded->at.first, std::move(recorded->blob));
  }
  return out;
}

Status StoreImpl::RewriteLocatorCopy(int64_t id, const CopyEntries& earlier) {
  CKPTDB_ASSIGN_OR_RETURN(const rocksdb::TablePropertiesCollection tables,
                          ChunkTablesOf(id, "the chunk locations"));
  CopyEntries entries;
  std::vector<std::pair<std::string, std::string>> ranges;
  for (const auto& [table, props] : tables) {
    if (std::optional<RecordedLocations> recorded = RecordedIn(*props)) {
      ranges.emplace_back(recorded->at.first, recorded->at.last);
      entries.emplace_back(recorded->at.first, std::move(recorded->blob));
    }
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
  CKPTDB_RETURN_IF_ERROR(fs_->CreateDirIfMissing(StagingDir(path_)));
  const std::string staged = StagingDir(path_) + "/" + kRestoredPrefix +
                             std::to_string(id) + "-" + std::to_string(table) +
                             ".sst";
  // Where a small chunk's bytes are: the damaged table itself, or the tables
  // a rebuild set aside.
  const Status written = WriteRestoredTable(
      id, locations, chunks,
      replaced.empty() ? TablesWithRange(locations.first, locations.last)
                       : std::vector<std::string>{replaced},
      staged);
  if (!written.ok()) {
    (void)fs_->Remove(staged);
    return written.WithContext(what);
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

Status StoreImpl::WriteRestoredTable(int64_t id,
                                     const ChunkLocations& locations,
                                     const StoredChunks& chunks,
                                     std::vector<std::string> sources,
                                     const std::string& staged) {
  std::optional<ValuePointer> value_file;
  if (!locations.value_file.empty()) {
    int64_t named = 0;
    value_file = ParseValueFileName(locations.value_file, &named);
    if (!value_file || named != id) {
      return Status::Corruption("the copy names the value file '" +
                                locations.value_file + "'");
    }
  }
  rocksdb::Options options = TableFileOptions(kChunksCf);
  auto log = std::make_shared<ValueFileLog>();
  log->name = locations.value_file;
  options.table_properties_collector_factories = {
      NewValueOffsetCollectorFactory(log)};
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options,
                                /*column_family=*/nullptr,
                                /*invalidate_page_cache=*/false);
  CKPTDB_RETURN_IF_ERROR(fs_->Remove(staged));
  CKPTDB_RETURN_IF_ERROR(FromRocks(writer.Open(staged), "staging " + staged));
  size_t entries = 0;
  for (auto it = chunks.lower_bound(locations.first);
       it != chunks.end() && it->first <= locations.last; ++it) {
    const auto& [key, stored] = *it;
    const std::optional<std::pair<bool, uint64_t>> at = locations.Find(key);
    if (!at) continue;
    std::string pointer_bytes;
    ChunkBuffer bytes;
    std::string_view value;
    if (at->first) {
      if (!value_file) continue;
      ValuePointer pointer = *value_file;
      pointer.offset = at->second;
      pointer.nbytes = stored.chunk.nbytes;
      log->end = std::max(log->end, pointer.offset + pointer.nbytes);
      log->next_offset = pointer.offset;
      log->next_is_pointer = true;
      pointer_bytes = EncodeValuePointer(pointer);
      value = pointer_bytes;
    } else {
      // Bytes that read wrong everywhere stay lost: reads report the chunk.
      if (!ReadSmallChunk(id, stored, at->second, &sources, &bytes)) continue;
      value = bytes.bytes();
    }
    const rocksdb::Status put =
        writer.Put(key, rocksdb::Slice(value.data(), value.size()));
    log->next_is_pointer = false;
    CKPTDB_RETURN_IF_ERROR(FromRocks(put, "staging " + staged));
    ++entries;
  }
  if (entries == 0) return Status::NotFound("no chunk to put");
  return FromRocks(writer.Finish(), "staging " + staged);
}

bool StoreImpl::ReadSmallChunk(int64_t id, const StoredChunk& stored,
                               uint64_t offset,
                               std::vector<std::string>* sources,
                               ChunkBuffer* bytes) {
  const std::string what = "chunk of tensor '" + stored.tensor_key +
                           "' at offset " +
                           ShapeToString(stored.chunk.box.origin) +
                           " (checkpoint id " + std::to_string(id) + ")";
  for (size_t i = 0; i < sources->size(); ++i) {
    if (!ReadAtCopiedPlace((*sources)[i], what, offset, stored.chunk, bytes)
             .ok())
      continue;
    // The file that held this chunk likely holds the next ones.
    std::rotate(sources->begin(), sources->begin() + i,
                sources->begin() + i + 1);
    return true;
  }
  return false;
}

}  // namespace ckptdb::storage
