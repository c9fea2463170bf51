#include "storage/ingester.h"

#include <rocksdb/sst_file_reader.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "storage/chunk_files.h"
#include "storage/column_families.h"
#include "storage/keys.h"
#include "storage/store.h"
#include "storage/value_files.h"

namespace ckptdb::storage {

ChunkIngester::ChunkIngester(rocksdb::DB& db,
                             rocksdb::ColumnFamilyHandle* chunks,
                             StoreFileSystem& fs, rocksdb::Env* env,
                             std::string store_path)
    : db_(db),
      chunks_(chunks),
      fs_(fs),
      env_(env),
      path_(std::move(store_path)) {}

Status ChunkIngester::Ingest(const std::vector<std::string>& staged,
                             const std::string& what) {
  // The record, written after the last batch, stays the commit point.
  for (size_t begin = 0; begin < staged.size(); begin += kIngestBatchFiles) {
    const std::vector<std::string> batch(
        staged.begin() + static_cast<std::ptrdiff_t>(begin),
        staged.begin() + static_cast<std::ptrdiff_t>(std::min(
                             staged.size(), begin + kIngestBatchFiles)));
    fs_.PinReadsOf({batch.begin(), batch.end()}, kIngestPinBytes);
    Status s = Scan(batch);
    if (s.ok()) {
      rocksdb::IngestExternalFileOptions ingest;
      ingest.move_files = true;
      ingest.snapshot_consistency = false;
      s = FromRocks(db_.IngestExternalFile(chunks_, batch, ingest),
                    "ingesting staged chunks of " + what);
    }
    fs_.UnpinReads();
    CKPTDB_RETURN_IF_ERROR(s);
  }
  return Status::OK();
}

Status ChunkIngester::IngestUnscanned(const std::string& table) {
  rocksdb::IngestExternalFileOptions ingest;
  ingest.move_files = true;
  return FromRocks(db_.IngestExternalFile(chunks_, {table}, ingest),
                   "ingesting " + table);
}

Status ChunkIngester::Scan(const std::vector<std::string>& staged) {
  rocksdb::Options options;
  static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
  options.env = env_;
  for (const std::string& path : staged) {
    rocksdb::SstFileReader reader(options);
    rocksdb::Status s = reader.Open(path);
    if (s.ok()) {
      rocksdb::ReadOptions ro;
      ro.fill_cache = false;
      std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(ro));
      it->SeekToFirst();
      if (it->Valid()) it->SeekToLast();
      s = it->status();
      if (s.ok() && !it->Valid())
        s = rocksdb::Status::Corruption("no chunk in the staged file");
    }
    CKPTDB_RETURN_IF_ERROR(
        FromRocks(s, "reading staged file " + path + " before ingesting it"));
    const auto& props = *reader.GetTableProperties();
    if (auto values = ValueFileOf(props)) {
      CKPTDB_RETURN_IF_ERROR(CheckValueFile(path, *values));
    } else if (HasValueFile(props)) {
      return Status::IOError("staged file " + path +
                             " names its value file in a malformed property");
    }
  }
  return Status::OK();
}

Status ChunkIngester::CheckValueFile(const std::string& staged,
                                     const ValueFileExtent& values) {
  const std::string path = ValuesDir(path_) + "/" + values.name;
  uint64_t size = 0;
  CKPTDB_RETURN_IF_ERROR(
      FromRocks(fs_.GetFileSize(path, rocksdb::IOOptions(), &size, nullptr),
                "value file " + path + " of staged file " + staged));
  if (size < values.end) {
    return Status::IOError("value file " + path + " of staged file " + staged +
                           " holds " + std::to_string(size) +
                           " bytes, its chunks need " +
                           std::to_string(values.end));
  }
  return Status::OK();
}

Status ChunkIngester::RepairBoundlessFiles(bool reingest) {
  std::vector<rocksdb::LiveFileMetaData> files;
  db_.GetLiveFilesMetaData(&files);
  for (const auto& f : files) {
    int64_t id = 0;
    if (f.column_family_name != kChunksCf ||
        (DecodeCheckpointId(f.smallestkey, &id) &&
         DecodeCheckpointId(f.largestkey, &id)))
      continue;
    const std::string path = f.db_path + f.name;
    const std::string link = StagingDir(path_) + "/repair-" + f.name.substr(1);
    const std::string what = "repairing table file " + path +
                             ", which RocksDB ingested without its key range";
    CKPTDB_RETURN_IF_ERROR(fs_.CreateDirIfMissing(StagingDir(path_)));
    CKPTDB_RETURN_IF_ERROR(fs_.Remove(link));
    CKPTDB_RETURN_IF_ERROR(
        FromRocks(fs_.LinkFile(path, link, {}, nullptr), what));
    CKPTDB_RETURN_IF_ERROR(FromRocks(db_.DeleteFile(f.name), what));
    if (!reingest) {
      CKPTDB_RETURN_IF_ERROR(fs_.Remove(link));
      continue;
    }
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = true;
    CKPTDB_RETURN_IF_ERROR(
        FromRocks(db_.IngestExternalFile(chunks_, {link}, ingest), what));
  }
  return Status::OK();
}

Status ChunkIngester::CheckIngested(const CheckpointMetadata& meta) {
  const int64_t id = meta.info.id;
  // Chunks an incremental save shares live in their holders' key ranges.
  uint64_t expected = 0;
  for (const auto& [key, tensor] : meta.tensors) {
    for (const ChunkMetadata& chunk : tensor.chunks)
      expected += chunk.holder_id == 0 ? 1 : 0;
  }
  // One walk of the live files (it costs each file's name, and a store of
  // many checkpoints has many): the chunks in the checkpoint's own key range,
  // and whether a file has no key range at all (repaired, and not counted).
  uint64_t found = 0;
  bool boundless = false;
  std::vector<rocksdb::LiveFileMetaData> files;
  db_.GetLiveFilesMetaData(&files);
  for (const auto& f : files) {
    if (f.column_family_name != kChunksCf) continue;
    int64_t first = 0, last = 0;
    if (!DecodeCheckpointId(f.smallestkey, &first) ||
        !DecodeCheckpointId(f.largestkey, &last)) {
      boundless = true;
    } else if (first == id && last == id) {
      found += f.num_entries;
    }
  }
  if (boundless)
    CKPTDB_RETURN_IF_ERROR(RepairBoundlessFiles(/*reingest=*/false));
  if (found == expected) return Status::OK();
  return Status::IOError("ingesting the staged chunks of checkpoint " +
                         std::to_string(id) + " into '" + path_ + "' left " +
                         std::to_string(found) + " of its " +
                         std::to_string(expected) + " chunks");
}

}  // namespace ckptdb::storage
