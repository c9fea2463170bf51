#include "storage/column_families.h"

#include <rocksdb/sst_file_reader.h>
#include <rocksdb/table.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "storage/chunk_files.h"
#include "storage/keys.h"

namespace ckptdb::storage {

rocksdb::ColumnFamilyOptions ChunkCfOptions(
    std::shared_ptr<rocksdb::Cache> block_cache) {
  rocksdb::ColumnFamilyOptions options;
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kNoCompression;
  // Chunks arrive only by ingestion of non-overlapping files into the
  // bottommost level; nothing ever needs to rewrite them.
  options.disable_auto_compactions = true;
  rocksdb::BlockBasedTableOptions table;
  table.block_size = 256 << 10;
  table.block_restart_interval = kChunkBlockRestartInterval;
  table.checksum = rocksdb::kXXH3;
  table.flush_block_policy_factory = NewChunkFlushBlockPolicyFactory();
  if (block_cache) table.block_cache = std::move(block_cache);
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  options.table_properties_collector_factories.push_back(
      NewValueOffsetCollectorFactory());
  return options;
}

int FileOpeningThreads(size_t table_files) {
  constexpr size_t kLoadedAtOpen = 16;  // RocksDB's kInitialLoadLimit
  return static_cast<int>(
      std::max<size_t>(1, std::min(table_files, kLoadedAtOpen) / 4));
}

size_t MetaCacheBytesFor(uint64_t live_table_bytes,
                         size_t largest_record_bytes) {
  if (live_table_bytes >= kMetaCacheBytes ||
      largest_record_bytes >= kMetaCacheBytes)
    return kMetaCacheBytes;
  const uint64_t wanted = live_table_bytes + 2 * uint64_t{largest_record_bytes};
  return static_cast<size_t>(
      std::clamp<uint64_t>(wanted, kMinMetaCacheBytes, kMetaCacheBytes));
}

std::shared_ptr<rocksdb::Cache> NewMetaBlockCache() {
  return rocksdb::NewLRUCache(kMetaCacheBytes, /*num_shard_bits=*/0);
}

rocksdb::ColumnFamilyOptions MetaCfOptions(
    std::shared_ptr<rocksdb::Cache> block_cache) {
  rocksdb::ColumnFamilyOptions options;
  options.compression = rocksdb::kNoCompression;
  // Compacted only when the store asks (CompactMetaIfDeep): a compaction
  // reads every block of its input files, and one running in the background
  // would meet a damaged block whenever it happened to start, failing the
  // writes around it and deleting its inputs, instead of at a known step.
  options.disable_auto_compactions = true;
  // A block cache that holds whole main records. RocksDB's default (8 MiB in
  // 16 shards of 512 KiB) drops every block larger than a shard as soon as it
  // is released: a checkpoint of 10,000 tensors has a main record of about
  // 1.7 MB, in a block of its own, which every listing (each save's, each
  // load's) would read from its file and checksum again. One shard: records
  // are read by the store's calls, not by many threads at once.
  rocksdb::BlockBasedTableOptions table;
  table.block_cache =
      block_cache ? std::move(block_cache) : NewMetaBlockCache();
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

std::optional<std::string> TableFileFamily(rocksdb::Env* env,
                                           const std::string& path) {
  rocksdb::Options options;
  static_cast<rocksdb::ColumnFamilyOptions&>(options) = ChunkCfOptions();
  options.env = env;
  rocksdb::SstFileReader reader(options);
  if (!reader.Open(path).ok()) return std::nullopt;
  return reader.GetTableProperties()->column_family_name;
}

std::set<int64_t> LiveChunkIds(rocksdb::DB& db) {
  std::vector<rocksdb::LiveFileMetaData> files;
  db.GetLiveFilesMetaData(&files);
  std::set<int64_t> ids;
  for (const auto& f : files) {
    if (f.column_family_name != kChunksCf) continue;
    int64_t id = 0;
    if (DecodeCheckpointId(f.smallestkey, &id)) ids.insert(id);
    if (DecodeCheckpointId(f.largestkey, &id)) ids.insert(id);
  }
  return ids;
}

}  // namespace ckptdb::storage
