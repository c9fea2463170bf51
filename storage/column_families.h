#pragma once

// The store's RocksDB column families and their options. Private to
// storage/.
//
//   chunks  one key per stored chunk (keys.h), in table files that arrive
//           only by ingestion of staged files (ingester.h) and are never
//           rewritten; the bytes of large chunks live in value files
//           (value_files.h), the table file holds a pointer to them.
//   meta    the checkpoint records, the store marker and the next id; written
//           straight into table files (never the write-ahead log) and
//           compacted only when the store asks.

#include <rocksdb/cache.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>

namespace ckptdb::storage {

inline constexpr char kChunksCf[] = "chunks";
inline constexpr char kMetaCf[] = "meta";
// Level-0 metadata table files at which the store compacts them
// (StoreImpl::CompactMetaIfDeep); RocksDB's own default trigger.
inline constexpr size_t kMetaCompactionTrigger = 4;

// Options of the `chunks` column family, which staged files are written with
// too. `block_cache` holds the allocator chunk reads use; chunks themselves
// never enter it (reads pass fill_cache = false).
rocksdb::ColumnFamilyOptions ChunkCfOptions(
    std::shared_ptr<rocksdb::Cache> block_cache = nullptr);
// The most bytes of decoded metadata blocks a store handle keeps (records
// read again by every listing and load); filled only by what is read. Each
// open, commit and delete of a handle sizes its cache to the live records,
// down to kMinMetaCacheBytes (StoreImpl::FitMetaCache).
inline constexpr size_t kMetaCacheBytes = size_t{64} << 20;
inline constexpr size_t kMinMetaCacheBytes = size_t{8} << 20;
// The threads an open of the database loads table files with, for a store of
// `table_files` table files: one for each 4 of the first 16 (RocksDB loads at
// most 16 at an open, over all column families), at least 1. RocksDB starts
// max_file_opening_threads - 1 threads for each column family at every open
// however few files there are, and its default of 16 (up to 45 threads for
// the store's three families) costs milliseconds of every open (their stacks
// mapped and unmapped), which a read-only follower pays for each new
// checkpoint. On storage slow to open a file, 16 files take 4 rounds.
int FileOpeningThreads(size_t table_files);
// The bytes of the `meta` block cache of a handle: room for
// the live metadata table files (`live_table_bytes`: every committed
// checkpoint's records) and for two more commits of `largest_record_bytes`
// (the largest records the handle committed: the next commit's read-back,
// and a compaction's rewrite), within [kMinMetaCacheBytes, kMetaCacheBytes].
// RocksDB leaves the blocks of a deleted or rewritten table file in the cache
// until newer blocks push them out; a cache much larger than what is read
// again fills with those, each new record in fresh memory.
size_t MetaCacheBytesFor(uint64_t live_table_bytes,
                         size_t largest_record_bytes);
// A block cache for the `meta` column family, of kMetaCacheBytes.
std::shared_ptr<rocksdb::Cache> NewMetaBlockCache();
// Options of the `meta` column family, with `block_cache` (a new one when
// null).
rocksdb::ColumnFamilyOptions MetaCfOptions(
    std::shared_ptr<rocksdb::Cache> block_cache = nullptr);

// The column family the properties of the table file at `path` name; nullopt
// for a file whose properties cannot be read.
std::optional<std::string> TableFileFamily(rocksdb::Env* env,
                                           const std::string& path);

// Whether a table file whose properties name `family` holds chunks: those of
// the `meta` and default families hold metadata; a staged file, written
// outside the database, names none.
inline bool IsChunkTableFamily(const std::string& family) {
  return family != kMetaCf && family != rocksdb::kDefaultColumnFamilyName;
}

// Checkpoint ids that some live table file of the `chunks` column family
// holds keys of (its first or last key).
std::set<int64_t> LiveChunkIds(rocksdb::DB& db);

}  // namespace ckptdb::storage
