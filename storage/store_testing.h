#pragma once

// Helpers for tests of the store: one tensor's bytes saved and read back.

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "storage/store.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage::testing {

// Stages and commits one checkpoint holding tensor "w" = bytes, split over
// `ranks` writers.
inline Result<CheckpointMetadata> SaveBytes(
    Store& store, const std::string& bytes, int ranks,
    std::optional<std::string> tag = std::nullopt) {
  CKPTDB_ASSIGN_OR_RETURN(int64_t id, store.NextCheckpointId());
  CheckpointMetadata meta;
  meta.info.id = id;
  meta.info.world_size = ranks;
  meta.info.tag = tag;
  meta.info.num_tensors = 1;
  meta.info.nbytes = static_cast<int64_t>(bytes.size());
  TensorMetadata& t = meta.tensors["w"];
  t.dtype = DType::kUInt8;
  t.global_shape = {static_cast<int64_t>(bytes.size())};
  meta.flat_mapping["w"] = {"w"};
  std::vector<std::string> files;
  const int64_t per = static_cast<int64_t>(bytes.size()) / ranks;
  for (int r = 0; r < ranks; ++r) {
    CKPTDB_ASSIGN_OR_RETURN(auto writer, store.NewStagedFile(id, r, 0));
    const int64_t begin = r * per;
    const int64_t len =
        r + 1 == ranks ? static_cast<int64_t>(bytes.size()) - begin : per;
    CKPTDB_ASSIGN_OR_RETURN(
        uint64_t sum,
        writer->Add("w", {begin}, std::string_view(bytes).substr(begin, len)));
    t.chunks.push_back(
        {Box{{begin}, {len}}, r, static_cast<uint64_t>(len), sum});
    CKPTDB_ASSIGN_OR_RETURN(std::string file, writer->Finish());
    files.push_back(file);
  }
  CKPTDB_RETURN_IF_ERROR(store.Commit(meta, files));
  return meta;
}

// `n` bytes of a pattern that differs with `seed` (and repeats no short run).
inline std::string Pattern(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<char>(((i + seed) * 2654435761u) >> 13);
  return out;
}

// The number of files under `dir` with extension `ext`, and their total size.
inline std::pair<int, uint64_t> FilesWith(const std::string& dir,
                                          const std::string& ext) {
  std::pair<int, uint64_t> out{0, 0};
  for (const auto& file : ckptdb::testing::FilesUnder(dir, {ext.c_str()})) {
    ++out.first;
    out.second += file.size;
  }
  return out;
}

inline std::string ReadAll(Store& store, const CheckpointMetadata& meta) {
  std::string out;
  for (const auto& chunk : meta.tensors.at("w").chunks) {
    auto buffer = store.ReadChunk(meta.info.id, "w", chunk);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    if (buffer.ok()) out += buffer->bytes();
  }
  return out;
}

// A new store at `dir` holding `bytes` as one checkpoint over `ranks`
// writers (SaveBytes); its metadata.
inline CheckpointMetadata SavedIn(const std::string& dir,
                                  const std::string& bytes, int ranks) {
  auto store = Store::Open(dir, {});
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {};
  auto saved = SaveBytes(**store, bytes, ranks);
  EXPECT_TRUE(saved.ok()) << saved.status().ToString();
  return saved.ok() ? *saved : CheckpointMetadata();
}

// The live table files of column family `family` ("chunks" or "meta") of the
// store at `dir`, from a read-only view of its database (beside an open
// handle, as of now).
inline std::vector<rocksdb::LiveFileMetaData> TableFiles(
    const std::string& dir, const std::string& family) {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, {}}, {"chunks", {}}, {"meta", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status opened = rocksdb::DB::OpenForReadOnly(
      rocksdb::DBOptions(), dir, cfs, &handles, &raw);
  EXPECT_TRUE(opened.ok()) << opened.ToString();
  std::vector<rocksdb::LiveFileMetaData> out;
  if (raw == nullptr) return out;
  std::vector<rocksdb::LiveFileMetaData> files;
  raw->GetLiveFilesMetaData(&files);
  for (auto& f : files) {
    if (f.column_family_name == family) out.push_back(std::move(f));
  }
  for (auto* h : handles) (void)raw->DestroyColumnFamilyHandle(h);
  delete raw;
  return out;
}

// The store's LOG line of checkpoint `id`'s commit, from "[ckptdb]
// checkpoint <id>" to its end; "" when there is none.
inline std::string CommitLogLine(const std::string& dir, int64_t id) {
  std::ifstream log(dir + "/LOG");
  const std::string text((std::istreambuf_iterator<char>(log)),
                         std::istreambuf_iterator<char>());
  const std::string line =
      "[ckptdb] checkpoint " + std::to_string(id) + " committed in ";
  const size_t at = text.find(line);
  if (at == std::string::npos) return "";
  return text.substr(at, text.find('\n', at) - at);
}

// The bytes of the live table files of column family `family` of the store
// at `dir` (TableFiles).
inline uint64_t LiveTableBytes(const std::string& dir,
                               const std::string& family) {
  uint64_t bytes = 0;
  for (const auto& file : TableFiles(dir, family)) bytes += file.size;
  return bytes;
}

}  // namespace ckptdb::storage::testing
