#include "storage/column_families.h"

#include <rocksdb/table.h>

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

rocksdb::ColumnFamilyOptions MetaCfOptions() {
  rocksdb::ColumnFamilyOptions options;
  options.compression = rocksdb::kNoCompression;
  // Compacted only when the store asks (CompactMetaIfDeep): a compaction
  // reads every block of its input files, and one running in the background
  // would meet a damaged block whenever it happened to start, failing the
  // writes around it and deleting its inputs, instead of at a known step.
  options.disable_auto_compactions = true;
  return options;
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
