#pragma once

// A fixture for tests of the store's parts below StoreImpl: a database with
// the `chunks` column family at a fresh directory, every file operation
// through a StoreFileSystem whose hooks can fail reads, staged files written
// and ingested as a save would.

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "storage/column_families.h"
#include "storage/ingester.h"
#include "storage/keys.h"
#include "storage/staged_file_writer.h"
#include "storage/store.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage::testing {

using ckptdb::testing::TempDir;

// Fails every read of files whose path ends in `suffix`, from the
// `fail_from`-th read of them on (counting from 0); counts those reads.
class FailReadsOf : public FileSystemHooks {
 public:
  int BeforeOperation(FileOp op, std::string_view path, uint64_t) override {
    if (op != FileOp::kRead || suffix.empty() || !path.ends_with(suffix))
      return 0;
    return reads.fetch_add(1) >= fail_from ? EIO : 0;
  }
  std::string suffix;
  int fail_from = 1 << 30;
  std::atomic<int> reads{0};
};

// A database with the store's `chunks` column family at a fresh directory,
// every file operation through a StoreFileSystem with FailReadsOf hooks, and
// staged files written into its staging directory.
class ChunksDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_ =
        std::make_shared<StoreFileSystem>(hooks_, /*sync=*/false, dir_.path());
    env_ = rocksdb::NewCompositeEnv(fs_);
    rocksdb::DBOptions options;
    options.create_if_missing = true;
    options.create_missing_column_families = true;
    options.env = env_.get();
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
        {kChunksCf, ChunkCfOptions()}};
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(
        rocksdb::DB::Open(options, dir_.path(), families, &handles_, &db).ok());
    db_.reset(db);
    ASSERT_TRUE(fs_->CreateDirIfMissing(StagingDir(dir_.path())).ok());
  }
  void TearDown() override {
    for (auto* h : handles_) db_->DestroyColumnFamilyHandle(h);
    db_.reset();
  }

  ChunkIngester Ingester() {
    return ChunkIngester(*db_, handles_[1], *fs_, env_.get(), dir_.path());
  }

  // Stages `sizes.size()` chunks of tensor "w" of checkpoint `id` by `rank`
  // (one per size, filled with `fill`), adding them to `meta`; the file.
  std::string Stage(int64_t id, int32_t rank, const std::vector<int64_t>& sizes,
                    char fill, CheckpointMetadata* meta) {
    const std::string path =
        StagingDir(dir_.path()) + "/" + StagedFileName(id, rank, 0);
    auto writer = OpenStagedFileWriter(path, dir_.path(), id, rank, 0,
                                       value_files_, fs_, env_);
    EXPECT_TRUE(writer.ok()) << writer.status().ToString();
    if (!writer.ok()) return "";
    meta->info.id = id;
    TensorMetadata& tensor = meta->tensors["w"];
    tensor.dtype = DType::kUInt8;
    for (int64_t size : sizes) {
      const int64_t origin = next_origin_;
      next_origin_ += size;
      auto sum = (*writer)->Add("w", {origin}, ChunkBytes(origin, size, fill));
      EXPECT_TRUE(sum.ok()) << sum.status().ToString();
      tensor.chunks.push_back(
          {Box{{origin}, {size}}, rank, static_cast<uint64_t>(size), *sum});
    }
    tensor.global_shape = {next_origin_};
    auto finished = (*writer)->Finish();
    EXPECT_TRUE(finished.ok()) << finished.status().ToString();
    return finished.ok() ? *finished : "";
  }

  // The bytes Stage gives the chunk at `origin`: `fill` repeated, or with
  // `patterned_`, bytes that differ from their neighbours' (so that a byte
  // read into the wrong place shows).
  std::string ChunkBytes(int64_t origin, int64_t size, char fill) const {
    std::string bytes(size, fill);
    if (patterned_) {
      for (int64_t i = 0; i < size; ++i)
        bytes[i] =
            static_cast<char>(((origin + i) * 131 + (origin + i) / 251) & 0xff);
    }
    return bytes;
  }

  // The chunks of checkpoint `id` the database holds, by counting keys.
  int CountChunks(int64_t id) {
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), handles_[1]));
    const std::string end = CheckpointKeyEnd(id);
    int n = 0;
    for (it->Seek(CheckpointKeyPrefix(id));
         it->Valid() && it->key().compare(end) < 0; it->Next())
      ++n;
    EXPECT_TRUE(it->status().ok()) << it->status().ToString();
    return n;
  }

  TempDir dir_;
  const std::shared_ptr<FailReadsOf> hooks_ = std::make_shared<FailReadsOf>();
  std::shared_ptr<StoreFileSystem> fs_;
  std::shared_ptr<rocksdb::Env> env_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  std::unique_ptr<rocksdb::DB> db_;
  int64_t next_origin_ = 0;
  // Whether staged files put large chunks in value files.
  bool value_files_ = true;
  // Whether Stage fills chunks with a pattern rather than `fill`.
  bool patterned_ = false;
};

}  // namespace ckptdb::storage::testing
