#include "storage/ingester.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "storage/chunks_db_testing.h"
#include "storage/column_families.h"
#include "storage/keys.h"
#include "storage/staged_file_writer.h"
#include "storage/store.h"
#include "storage/value_files.h"

namespace ckptdb::storage {
namespace {

using IngesterTest = testing::ChunksDbTest;

TEST_F(IngesterTest, IngestsStagedFilesInBatchesAndFindsEveryChunkInTheRange) {
  CheckpointMetadata meta;
  std::vector<std::string> staged;
  // More files than one batch; small chunks and one in a value file.
  for (int32_t rank = 0; rank < static_cast<int32_t>(kIngestBatchFiles) + 4;
       ++rank)
    staged.push_back(Stage(7, rank, {100, 300}, 'a', &meta));
  staged.push_back(Stage(7, 99, {int64_t{kExternalValueBytes}}, 'b', &meta));
  ASSERT_TRUE(Ingester().Ingest(staged, "checkpoint 7").ok());
  EXPECT_TRUE(Ingester().CheckIngested(meta).ok());
  EXPECT_EQ(CountChunks(7), 2 * (static_cast<int>(kIngestBatchFiles) + 4) + 1);
  EXPECT_EQ(LiveChunkIds(*db_), std::set<int64_t>{7});
  // The staged files were moved, not copied.
  for (const std::string& file : staged)
    EXPECT_FALSE(std::filesystem::exists(file)) << file;
}

TEST_F(IngesterTest, CheckIngestedCountsOwnChunksAndNamesTheShortfall) {
  CheckpointMetadata meta;
  const std::string staged = Stage(3, 0, {10, 20}, 'c', &meta);
  ASSERT_TRUE(Ingester().Ingest({staged}, "checkpoint 3").ok());
  // A shared chunk lives in its holder's range: not counted.
  ChunkMetadata shared = meta.tensors["w"].chunks[0];
  shared.holder_id = 1;
  meta.tensors["w"].chunks.push_back(shared);
  EXPECT_TRUE(Ingester().CheckIngested(meta).ok());
  // One more chunk of its own than the files hold.
  ChunkMetadata own = meta.tensors["w"].chunks[0];
  own.holder_id = 0;
  meta.tensors["w"].chunks.push_back(own);
  const Status s = Ingester().CheckIngested(meta);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find("checkpoint 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("left 2 of its 3 chunks"), std::string::npos)
      << s.message();
}

// Every read of the staged file fails from the n-th on, for each n until one
// ingestion succeeds: each either refuses the file with an error naming it
// and ingests nothing, or ingests every chunk. RocksDB 7.8 would abort the
// process where its read of the first key succeeds and of the last fails.
TEST_F(IngesterTest, AStagedFileThatCannotBeReadIsRefusedWithNothingIngested) {
  int refused = 0;
  for (int n = 0; n < 200; ++n) {
    CheckpointMetadata meta;
    next_origin_ = 0;
    const int64_t id = 10 + n;
    const std::string staged = Stage(
        id, 0, {100, 2000, int64_t{kExternalValueBytes}, 50000}, 'd', &meta);
    hooks_->suffix = staged;
    hooks_->reads = 0;
    hooks_->fail_from = n;
    const Status s =
        Ingester().Ingest({staged}, "checkpoint " + std::to_string(id));
    hooks_->suffix.clear();
    if (s.ok()) {
      EXPECT_TRUE(Ingester().CheckIngested(meta).ok());
      EXPECT_EQ(CountChunks(id), 4);
      EXPECT_GT(refused, 0) << "no read of the staged file failed an ingestion";
      return;
    }
    ++refused;
    EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
    EXPECT_NE(s.message().find(staged), std::string::npos) << s.message();
    EXPECT_FALSE(LiveChunkIds(*db_).contains(id)) << "after read " << n;
  }
  FAIL() << "the ingestion never succeeded";
}

TEST_F(IngesterTest, AStagedFileWhoseValueFileIsCutShortIsRefused) {
  CheckpointMetadata meta;
  const std::string staged =
      Stage(5, 0, {int64_t{kExternalValueBytes} * 2}, 'e', &meta);
  std::vector<std::string> values;
  for (const auto& entry :
       std::filesystem::directory_iterator(ValueDirOf(dir_.path(), 5)))
    values.push_back(entry.path().string());
  ASSERT_EQ(values.size(), 1u);
  std::filesystem::resize_file(values[0], kExternalValueBytes);
  const Status s = Ingester().Ingest({staged}, "checkpoint 5");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find(values[0]), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("its chunks need"), std::string::npos)
      << s.message();
  EXPECT_TRUE(LiveChunkIds(*db_).empty());
  std::filesystem::remove(values[0]);
  EXPECT_EQ(Ingester().Ingest({staged}, "checkpoint 5").code(),
            StatusCode::kIOError);
  EXPECT_TRUE(LiveChunkIds(*db_).empty());
}

// Table files among the live chunk files without a key range.
int BoundlessFiles(rocksdb::DB& db) {
  std::vector<rocksdb::LiveFileMetaData> files;
  db.GetLiveFilesMetaData(&files);
  int n = 0;
  for (const auto& f : files) {
    int64_t id = 0;
    if (f.column_family_name == kChunksCf &&
        !DecodeCheckpointId(f.smallestkey, &id))
      ++n;
  }
  return n;
}

// Unscanned, RocksDB 7.8 records a file with an empty key range when its
// reads fail from the right one on, and reports success: the sweep finds
// such a failure (proving the repair is needed), and the repair ingests the
// file again with its range, or drops it.
TEST_F(IngesterTest, AFileIngestedWithoutItsKeyRangeIsIngestedAgainOrDropped) {
  int repaired = 0;
  for (int n = 0; n < 100; ++n) {
    CheckpointMetadata meta;
    next_origin_ = 0;
    const int64_t id = 10 + n + 100 * repaired;
    const std::string staged = Stage(
        id, 0, {100, 2000, int64_t{kExternalValueBytes}, 50000}, 'f', &meta);
    hooks_->suffix = staged;
    hooks_->reads = 0;
    hooks_->fail_from = n;
    const Status s = Ingester().IngestUnscanned(staged);
    hooks_->suffix.clear();
    if (BoundlessFiles(*db_) == 0) {
      if (!s.ok()) continue;
      EXPECT_EQ(CountChunks(id), 4);
      EXPECT_GT(repaired, 0) << "no failed read left a file without its range";
      return;
    }
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(CountChunks(id), 0) << "reads miss the chunks of such a file";
    const bool reingest = repaired % 2 == 0;
    ASSERT_TRUE(Ingester().RepairBoundlessFiles(reingest).ok());
    EXPECT_EQ(BoundlessFiles(*db_), 0);
    EXPECT_EQ(CountChunks(id), reingest ? 4 : 0);
    EXPECT_EQ(LiveChunkIds(*db_).contains(id), reingest);
    if (reingest) {
      EXPECT_TRUE(Ingester().CheckIngested(meta).ok());
    } else {
      EXPECT_EQ(Ingester().CheckIngested(meta).code(), StatusCode::kIOError);
    }
    ++repaired;
    if (reingest) --n;  // the same failure again, dropped this time
  }
  FAIL() << "the ingestion never succeeded";
}

}  // namespace
}  // namespace ckptdb::storage
