#pragma once

// Staged chunk files: one writer rank's chunks of one checkpoint (one part),
// written with RocksDB's SstFileWriter into the store's staging directory for
// the ingester (ingester.h) to move into the database. The bytes of large
// chunks go to a value file (value_files.h), with a pointer in the table
// file. Private to storage/.

#include <rocksdb/env.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ckptdb/status.h"
#include "storage/file_system.h"
#include "storage/store.h"

namespace ckptdb::storage {

// <checkpoint id>-<rank>-<part>.sst
std::string StagedFileName(int64_t checkpoint_id, int32_t rank, int part);

// A writer of the staged file at `path` (created, replacing any file there)
// for chunks of checkpoint `checkpoint_id` written by `rank`, part `part`, of
// the store at `store_path`. With `value_files`, chunks of
// kExternalValueBytes or more go to a value file. Every file operation goes
// through `fs`, which `env` is over.
Result<std::unique_ptr<StagedFileWriter>> OpenStagedFileWriter(
    const std::string& path, const std::string& store_path,
    int64_t checkpoint_id, int32_t rank, uint32_t part, bool value_files,
    std::shared_ptr<StoreFileSystem> fs, std::shared_ptr<rocksdb::Env> env);

}  // namespace ckptdb::storage
