#pragma once

// The ingester: moves staged chunk files (one writer's chunks of one
// checkpoint, staged_file_writer.h) into the `chunks` column family, and
// holds the work-arounds RocksDB 7.8's ingestion needs. Each is named for the
// failure it prevents:
//
//   Scan before ingesting (Ingest): RocksDB 7.8 aborts the process (an
//     assertion) when, while ingesting a file, its read of the first key
//     succeeds and its read of the last key fails. Every staged file is
//     therefore read first, first and last key, with its reads pinned in
//     memory for the ingestion that follows (StoreFileSystem::PinReadsOf):
//     a file that cannot be read is refused with an IOError before RocksDB
//     sees it, and the ingestion reads only what the scan read.
//   Files without a key range (RepairBoundlessFiles): RocksDB 7.8 ingests a
//     file whose key range it failed to read with an empty range; reads then
//     miss its chunks and deletions over it trip assertions. Such a file is
//     taken out of the database and ingested again (its bytes are intact), or
//     dropped.
//   Counting what arrived (CheckIngested): an ingestion that reports success
//     has put every chunk of the checkpoint in files of its key range.
//
// Private to storage/. A view over an open database: made for each use, it
// holds no state of its own.

#include <rocksdb/db.h>
#include <rocksdb/env.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ckptdb/metadata.h"
#include "ckptdb/status.h"
#include "storage/file_system.h"

namespace ckptdb::storage {

struct ValueFileExtent;

// Staged files ingested together, and the bytes of their reads kept in
// memory meanwhile (StoreFileSystem::PinReadsOf): the footer, index and the
// first and last data blocks of each, a few MiB with the default chunk size.
inline constexpr size_t kIngestBatchFiles = 16;
inline constexpr uint64_t kIngestPinBytes = uint64_t{256} << 20;

class ChunkIngester {
 public:
  // `chunks`: the `chunks` column family of `db`; `env` is over `fs`;
  // `store_path` the store directory (value files and staging under it).
  ChunkIngester(rocksdb::DB& db, rocksdb::ColumnFamilyHandle* chunks,
                StoreFileSystem& fs, rocksdb::Env* env, std::string store_path);

  // Ingests `staged` (moving the files), kIngestBatchFiles at a time, each
  // batch scanned first. `what` names the checkpoint in errors. A file that
  // cannot be read, or whose value file is missing or too short, fails the
  // call before its batch is ingested.
  Status Ingest(const std::vector<std::string>& staged,
                const std::string& what);
  // Ingests one table file as it is, unscanned (the tables a rebuild
  // recovered, which may be damaged: the caller sets aside one that fails).
  Status IngestUnscanned(const std::string& table);
  // Takes each live chunk table file without a key range out of the
  // database and, with `reingest`, ingests it again; else drops it.
  Status RepairBoundlessFiles(bool reingest);
  // After an ingestion of checkpoint `meta.info.id`'s chunks: drops files
  // without a key range, then IOError unless the files of the checkpoint's
  // key range hold every chunk it stores itself (not those it shares).
  Status CheckIngested(const CheckpointMetadata& meta);

 private:
  // Reads each file's first and last key and checks its value file.
  Status Scan(const std::vector<std::string>& staged);
  // IOError unless the value file a staged file points into is there and
  // long enough.
  Status CheckValueFile(const std::string& staged,
                        const ValueFileExtent& values);

  rocksdb::DB& db_;
  rocksdb::ColumnFamilyHandle* const chunks_;
  StoreFileSystem& fs_;
  rocksdb::Env* const env_;
  const std::string path_;
};

}  // namespace ckptdb::storage
