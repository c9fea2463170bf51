#pragma once

// Turns a store into one of an earlier format version: 1 (what ckptdb wrote
// before format 2: every checkpoint's records become its one format-1 record,
// chunks inline, with no tensor records) or 3 (before format 4: a record for
// every tensor, none of its chunks in the main record). Chunks, journal and
// markers are the same in all versions. For tests that open such stores with
// today's code.

#include <rocksdb/db.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckptdb/status.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"

namespace ckptdb::testing {

// REQUIRES: no handle has the store at `dir` open; version is 1 or 3.
inline Status RewriteInFormat(const std::string& dir, uint32_t version) {
  rocksdb::DBOptions options;
  rocksdb::ColumnFamilyOptions chunks;
  // The chunk files must stay as ingested.
  chunks.disable_auto_compactions = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, {}},
      {"chunks", chunks},
      {"meta", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, families, &handles, &raw);
  if (!s.ok()) return Status::IOError(s.ToString());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::ColumnFamilyHandle* meta = handles[2];
  // Each checkpoint's records, by id.
  std::map<int64_t, std::vector<std::pair<std::string, std::string>>> records;
  {
    std::unique_ptr<rocksdb::Iterator> it(
        db->NewIterator(rocksdb::ReadOptions(), meta));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      int64_t id = 0;
      std::string_view tensor;
      const std::string key = it->key().ToString();
      if (storage::DecodeMetaKey(key, &id) ||
          storage::DecodeTensorRecordKey(key, &id, &tensor) ||
          storage::DecodeSmallTensorsKey(key, &id))
        records[id].emplace_back(key, it->value().ToString());
    }
  }
  rocksdb::WriteBatch batch;
  Status result;
  for (const auto& [id, list] : records) {
    auto decoded = storage::DecodeCheckpointRecords(list);
    if (!decoded.ok()) {
      result = decoded.status();
      break;
    }
    for (const auto& [key, value] : list) (void)batch.Delete(meta, key);
    if (version == 1) {
      (void)batch.Put(meta, storage::MetaKey(id),
                      storage::EncodeCheckpointV1(*decoded));
      continue;
    }
    for (const auto& [key, value] :
         storage::EncodeCheckpointRecordsOfFormat(*decoded, version))
      (void)batch.Put(meta, key, value);
  }
  // As the store writes metadata: no write-ahead log, flushed at once.
  rocksdb::WriteOptions write;
  write.disableWAL = true;
  if (result.ok()) {
    s = db->Write(write, &batch);
    if (s.ok()) s = db->Flush(rocksdb::FlushOptions(), meta);
    if (!s.ok()) result = Status::IOError(s.ToString());
  }
  for (auto* h : handles) (void)db->DestroyColumnFamilyHandle(h);
  (void)db->Close();
  return result;
}

inline Status RewriteAsFormat1(const std::string& dir) {
  return RewriteInFormat(dir, 1);
}

}  // namespace ckptdb::testing
