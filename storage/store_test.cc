#include "storage/store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <filesystem>
#include <fstream>

#include "storage/keys.h"
#include "storage/value_files.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::SnapshotDir;
using ckptdb::testing::TempDir;

// Stages and commits one checkpoint holding tensor "w" = bytes, split over
// `ranks` writers.
Result<CheckpointMetadata> SaveBytes(
    Store& store, const std::string& bytes, int ranks,
    std::optional<std::string> tag = std::nullopt) {
  ASSIGN_OR_RETURN(int64_t id, store.NextCheckpointId());
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
    ASSIGN_OR_RETURN(auto writer, store.NewStagedFile(id, r, 0));
    const int64_t begin = r * per;
    const int64_t len =
        r + 1 == ranks ? static_cast<int64_t>(bytes.size()) - begin : per;
    ASSIGN_OR_RETURN(
        uint64_t sum,
        writer->Add("w", {begin}, std::string_view(bytes).substr(begin, len)));
    t.chunks.push_back({{begin}, {len}, r, static_cast<uint64_t>(len), sum});
    ASSIGN_OR_RETURN(std::string file, writer->Finish());
    files.push_back(file);
  }
  RETURN_IF_ERROR(store.Commit(meta, files));
  return meta;
}

std::string ReadAll(Store& store, const CheckpointMetadata& meta) {
  std::string out;
  for (const auto& chunk : meta.tensors.at("w").chunks) {
    auto buffer = store.ReadChunk(meta.info.id, "w", chunk);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    if (buffer.ok()) out += buffer->bytes();
  }
  return out;
}

// Flips one byte inside the first run of 4096 `fill` bytes of a table or value
// file of the store at `dir`: one chunk's value is damaged.
bool DamageOneChunk(const std::string& dir, char fill) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.path().extension() != ".sst" &&
        entry.path().extension() != ".val")
      continue;
    std::fstream f(entry.path(),
                   std::ios::in | std::ios::out | std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(f)), {});
    auto pos = content.find(std::string(4096, fill));
    if (pos == std::string::npos) continue;
    f.seekp(static_cast<std::streamoff>(pos + 100));
    f.put(static_cast<char>(fill ^ 1));
    return true;
  }
  return false;
}

// Saves `payload` (runs of 'q') over 2 writers into a store at `dir`, then
// damages one chunk's value in its file.
void SaveOverTwoWritersAndDamageOne(const std::string& dir,
                                    const std::string& payload,
                                    CheckpointMetadata* meta) {
  {
    auto store = Store::Open(dir, {});
    ASSERT_TRUE(store.ok());
    auto saved = SaveBytes(**store, payload, 2);
    ASSERT_TRUE(saved.ok());
    *meta = *saved;
  }
  ASSERT_TRUE(DamageOneChunk(dir, 'q'));
}

TEST(StoreTest, CommitListReadDelete) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("s"), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto first = SaveBytes(**store, std::string(1000, 'a'), 3, "one");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const std::string second_bytes = "a pattern only the second checkpoint has";
  auto second = SaveBytes(**store, second_bytes, 1);
  ASSERT_TRUE(second.ok());
  auto list = (*store)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].id, 1);
  EXPECT_EQ((*list)[1].id, 2);
  EXPECT_EQ(ReadAll(**store, *first), std::string(1000, 'a'));
  EXPECT_EQ(*(*store)->Resolve(CheckpointSelector::Tag("one")), 1);
  EXPECT_EQ(*(*store)->Resolve(CheckpointSelector::Latest()), 2);
  auto dup = (*store)->CheckTagFree("one");
  EXPECT_TRUE(dup.IsInvalidArgument());
  auto missing = (*store)->Resolve(CheckpointSelector::Step(5));
  EXPECT_TRUE(missing.status().IsNotFound());
  EXPECT_NE(missing.status().message().find("step 5"), std::string::npos);

  // Table files holding the second checkpoint's bytes.
  auto holding_second = [&]() {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.Sub("s"))) {
      if (e.path().extension() != ".sst") continue;
      std::ifstream in(e.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      n += bytes.find(second_bytes) != std::string::npos;
    }
    return n;
  };
  EXPECT_EQ(holding_second(), 1);
  ASSERT_TRUE((*store)->Delete(2).ok());
  EXPECT_EQ((*store)->List()->size(), 1u);
  // The deleted checkpoint's file is gone (space reclaimed without rewriting
  // other chunks).
  EXPECT_EQ(holding_second(), 0);
  EXPECT_TRUE((*store)->Delete(2).IsNotFound());
  // Ids keep increasing after a delete of the latest checkpoint.
  auto third = SaveBytes(**store, std::string(5, 'c'), 1);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->info.id, 3);
}

TEST(StoreTest, ReopenKeepsCheckpoints) {
  TempDir dir;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(SaveBytes(**store, "hello world", 2).ok());
  }
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  auto meta = (*store)->GetMetadata(1);
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(ReadAll(**store, *meta), "hello world");
}

// RocksDB 7.x keeps the empty log of every read-write open that wrote
// nothing, and each open recovers them all: a store opened at every job start
// would pile them up.
TEST(StoreTest, ReopeningLeavesNoEmptyLogsBehind) {
  TempDir dir;
  auto logs = [&] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir.path()))
      n += e.path().extension() == ".log";
    return n;
  };
  for (int open = 0; open < 5; ++open) {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    if (open == 1 || open == 3) {  // written before and after a cleanup
      ASSERT_TRUE(SaveBytes(**store, "hello " + std::to_string(open), 2).ok());
    }
  }
  EXPECT_LE(logs(), 1);
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  for (int id : {1, 2}) {
    auto meta = (*store)->GetMetadata(id);
    ASSERT_TRUE(meta.ok()) << meta.status().ToString();
    EXPECT_EQ(ReadAll(**store, *meta), id == 1 ? "hello 1" : "hello 3");
  }
}

TEST(StoreTest, RejectsNonStoreDirectories) {
  TempDir dir;
  std::ofstream(dir.Sub("notes.txt")) << "hi";
  auto s = Store::Open(dir.path(), {});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(s.status().IsInvalidArgument());
  EXPECT_NE(s.status().message().find("not a ckptdb store"), std::string::npos);
  EXPECT_FALSE(Store::Open(dir.Sub("notes.txt"), {}).ok());
  StoreOptions ro;
  ro.read_only = true;
  auto absent = Store::Open(dir.Sub("absent"), ro);
  EXPECT_TRUE(absent.status().IsNotFound());
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("absent")));
}

TEST(StoreTest, ReadOnlyOpenNeverModifiesTheDirectory) {
  TempDir dir;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(SaveBytes(**store, std::string(4096, 'x'), 2).ok());
  }
  const auto before = SnapshotDir(dir.path());
  {
    StoreOptions ro;
    ro.read_only = true;
    auto store = Store::Open(dir.path(), ro);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto meta = (*store)->GetMetadata(1);
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(ReadAll(**store, *meta), std::string(4096, 'x'));
    EXPECT_EQ((*store)->NextCheckpointId().status().code(),
              StatusCode::kFailedPrecondition);
    EXPECT_FALSE((*store)->Delete(1).ok());
    ASSERT_TRUE((*store)->Refresh().ok());
  }
  EXPECT_EQ(SnapshotDir(dir.path()), before);
}

TEST(StoreTest, ReadOnlyHandleSeesCommitsAfterRefresh) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok());
  StoreOptions ro;
  ro.read_only = true;
  auto reader = Store::Open(dir.path(), ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  ASSERT_TRUE(SaveBytes(**writer, "abc", 1).ok());
  ASSERT_TRUE((*reader)->Refresh().ok());
  auto meta = (*reader)->GetMetadata(1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(ReadAll(**reader, *meta), "abc");
}

TEST(StoreTest, LeftoversOfAnInterruptedSaveAreRemovedAtOpen) {
  TempDir dir;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(SaveBytes(**store, "kept", 1).ok());
    // A save that staged and even ingested chunks but never wrote its record:
    // simulate by ingesting through Commit of a record and deleting just the
    // record is not possible, so stage files and leave them.
    auto writer = (*store)->NewStagedFile(2, 0, 0);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Add("w", {0}, "partial").ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    ASSERT_FALSE(std::filesystem::is_empty(StagingDir(dir.path())));
  }
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE(std::filesystem::exists(StagingDir(dir.path())));
  EXPECT_EQ((*store)->List()->size(), 1u);
}

TEST(StoreTest, DamagedChunkIsCorruptionNamingKeyAndOffset) {
  TempDir dir;
  const std::string payload(1 << 16, 'q');
  CheckpointMetadata meta;
  ASSERT_NO_FATAL_FAILURE(
      SaveOverTwoWritersAndDamageOne(dir.path(), payload, &meta));
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  int bad = 0;
  for (const auto& chunk : meta.tensors.at("w").chunks) {
    auto buffer = (*store)->ReadChunk(meta.info.id, "w", chunk);
    if (!buffer.ok()) {
      ++bad;
      EXPECT_TRUE(buffer.status().IsCorruption()) << buffer.status().ToString();
      EXPECT_NE(buffer.status().message().find("tensor 'w' at offset ["),
                std::string::npos);
    }
  }
  EXPECT_EQ(bad, 1);
}

// Chunks that start a data block of their file are read straight from it,
// into a pooled buffer or a caller's memory, bit-exact; chunks that share a
// block (small ones) and everything after a failed direct read go through
// RocksDB. Direct reads work on read-only handles and after reopening.
TEST(StoreTest, LargeChunksAreReadStraightFromTheirFiles) {
  TempDir dir;
  std::string payload(3 << 20, '\0');
  for (size_t i = 0; i < payload.size(); ++i)
    payload[i] = static_cast<char>((i * 2654435761u) >> 13);
  CheckpointMetadata meta;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    auto saved = SaveBytes(**store, payload, 3);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    meta = *saved;
    auto small = SaveBytes(**store, "tiny bytes", 2);
    ASSERT_TRUE(small.ok());
    for (const auto& chunk : small->tensors.at("w").chunks) {
      auto buffer = (*store)->ReadChunk(small->info.id, "w", chunk);
      ASSERT_TRUE(buffer.ok());
      EXPECT_FALSE(buffer->read_directly());
    }
    EXPECT_EQ(ReadAll(**store, *small), "tiny bytes");
  }
  for (bool read_only : {false, true}) {
    auto store = Store::Open(dir.path(), {.read_only = read_only});
    ASSERT_TRUE(store.ok());
    std::string whole, into(payload.size(), '\0');
    for (const auto& chunk : meta.tensors.at("w").chunks) {
      auto buffer = (*store)->ReadChunk(meta.info.id, "w", chunk);
      ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
      EXPECT_TRUE(buffer->read_directly());
      whole += buffer->bytes();
      ASSERT_TRUE((*store)
                      ->ReadChunkInto(meta.info.id, "w", chunk,
                                      into.data() + chunk.global_offset[0])
                      .ok());
    }
    EXPECT_TRUE(whole == payload) << read_only;
    EXPECT_TRUE(into == payload) << read_only;
  }
}

// One file with small chunks sharing blocks and large chunks between them:
// every chunk reads back exactly, by whichever path, and the large ones that
// start a block are read directly.
TEST(StoreTest, SmallAndLargeChunksOfOneFileReadBackExactly) {
  TempDir dir;
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  const std::vector<int64_t> sizes = {1000, 1000,      1000, 300 << 10, 1000,
                                      1000, 200 << 10, 1000, 700 << 10, 5};
  CheckpointMetadata meta;
  meta.info.id = 1;
  meta.info.world_size = 1;
  TensorMetadata& t = meta.tensors["w"];
  t.dtype = DType::kUInt8;
  meta.flat_mapping["w"] = {"w"};
  std::string all;
  auto writer = (*store)->NewStagedFile(1, 0, 0);
  ASSERT_TRUE(writer.ok());
  for (int64_t n : sizes) {
    std::string bytes(static_cast<size_t>(n), '\0');
    for (auto& c : bytes)
      c = static_cast<char>(all.size() * 7 + (&c - bytes.data()));
    const int64_t at = static_cast<int64_t>(all.size());
    auto sum = (*writer)->Add("w", {at}, bytes);
    ASSERT_TRUE(sum.ok());
    t.chunks.push_back({{at}, {n}, 0, static_cast<uint64_t>(n), *sum});
    all += bytes;
  }
  t.global_shape = {static_cast<int64_t>(all.size())};
  auto file = (*writer)->Finish();
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE((*store)->Commit(meta, {*file}).ok());
  std::string into(all.size(), '\0');
  for (const auto& chunk : t.chunks) {
    auto buffer = (*store)->ReadChunk(1, "w", chunk);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    EXPECT_TRUE(buffer->bytes() == std::string_view(all).substr(
                                       chunk.global_offset[0], chunk.nbytes));
    if (chunk.nbytes == (300 << 10) || chunk.nbytes == (700 << 10)) {
      EXPECT_TRUE(buffer->read_directly()) << chunk.nbytes;
    }
    ASSERT_TRUE(
        (*store)
            ->ReadChunkInto(1, "w", chunk, into.data() + chunk.global_offset[0])
            .ok());
    // Scattered: pieces of every size down to 0 bytes, more of them than one
    // preadv takes, each written after a gap.
    std::vector<std::string> held;
    std::vector<ChunkPiece> pieces;
    const size_t step = chunk.nbytes > 100000 ? 331 : 17;
    for (size_t at = 0, k = 0; at < chunk.nbytes; ++k) {
      const size_t len = std::min<size_t>(chunk.nbytes - at, (k % 3) * step);
      held.emplace_back(len + 5, '#');
      pieces.push_back({held.back().data() + 5, len});
      at += len;
    }
    ASSERT_TRUE((*store)->ReadChunkScattered(1, "w", chunk, pieces).ok());
    std::string joined;
    for (const ChunkPiece& p : pieces) joined.append(p.data, p.size);
    EXPECT_TRUE(joined == std::string_view(all).substr(chunk.global_offset[0],
                                                       chunk.nbytes))
        << chunk.nbytes << " bytes in " << pieces.size() << " pieces";
  }
  EXPECT_TRUE(into == all);
}

// A damaged value fails the direct read's checksum, then RocksDB's read:
// Corruption either way, and other chunks still read directly.
TEST(StoreTest, DamagedChunkIsCorruptionThroughEveryReadPath) {
  TempDir dir;
  const std::string payload(1 << 20, 'q');
  CheckpointMetadata meta;
  ASSERT_NO_FATAL_FAILURE(
      SaveOverTwoWritersAndDamageOne(dir.path(), payload, &meta));
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  int bad = 0;
  std::string into(payload.size() / 2, '\0');
  for (const auto& chunk : meta.tensors.at("w").chunks) {
    auto buffer = (*store)->ReadChunk(meta.info.id, "w", chunk);
    Status direct =
        (*store)->ReadChunkInto(meta.info.id, "w", chunk, into.data());
    EXPECT_EQ(buffer.ok(), direct.ok());
    const size_t half = chunk.nbytes / 2;
    Status scattered = (*store)->ReadChunkScattered(
        meta.info.id, "w", chunk,
        {{into.data() + half, chunk.nbytes - half}, {into.data(), half}});
    EXPECT_EQ(scattered.ok(), direct.ok());
    EXPECT_EQ(scattered.IsCorruption(), direct.IsCorruption());
    if (buffer.ok()) {
      EXPECT_TRUE(buffer->read_directly());
      continue;
    }
    ++bad;
    EXPECT_TRUE(buffer.status().IsCorruption());
    EXPECT_TRUE(direct.IsCorruption()) << direct.ToString();
    EXPECT_NE(direct.message().find("checksum mismatch"), std::string::npos);
    // Verifying (RocksDB's block checksums over the pointer, then the chunk's
    // own over the value file's bytes) catches it too.
    Status verified = (*store)->VerifyChunk(meta.info.id, "w", chunk);
    EXPECT_TRUE(verified.IsCorruption()) << verified.ToString();
  }
  EXPECT_EQ(bad, 1);
}

TEST(StoreTest, ChecksumMismatchDetected) {
  TempDir dir;
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  auto meta = SaveBytes(**store, "abcdef", 1);
  ASSERT_TRUE(meta.ok());
  ChunkMetadata chunk = meta->tensors.at("w").chunks[0];
  chunk.checksum ^= 1;
  auto buffer = (*store)->ReadChunk(meta->info.id, "w", chunk);
  EXPECT_TRUE(buffer.status().IsCorruption());
  EXPECT_NE(buffer.status().message().find("checksum mismatch"),
            std::string::npos);
}

}  // namespace
}  // namespace ckptdb::storage

namespace ckptdb::storage {
namespace {

// Every chunk file sits in the bottommost level, where nothing compacts it:
// tensor bytes are written once (by the rank that staged them) and never
// rewritten, through saves, deletes and reopens.
TEST(StoreTest, IngestedFilesStayInTheBottommostLevelAndAreNeverRewritten) {
  TempDir dir;
  std::vector<CheckpointMetadata> saved;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 5; ++i) {
      auto meta = SaveBytes(
          **store, std::string(100000 + i, static_cast<char>('a' + i)), 3);
      ASSERT_TRUE(meta.ok()) << meta.status().ToString();
      saved.push_back(*meta);
    }
    ASSERT_TRUE((*store)->Delete(2).ok());
    ASSERT_TRUE((*store)->Delete(4).ok());
  }
  auto chunk_files = [&]() {
    rocksdb::DBOptions options;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {"chunks", {}}, {"meta", {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    EXPECT_TRUE(
        rocksdb::DB::OpenForReadOnly(options, dir.path(), cfs, &handles, &raw)
            .ok());
    std::vector<rocksdb::LiveFileMetaData> files;
    raw->GetLiveFilesMetaData(&files);
    std::map<std::string, int> out;  // file name -> level
    uint64_t bytes = 0;
    for (const auto& f : files) {
      if (f.column_family_name != "chunks") continue;
      out[f.name] = f.level;
      bytes += f.size;
    }
    for (auto* h : handles) raw->DestroyColumnFamilyHandle(h);
    delete raw;
    // Write amplification: the chunk files hold the surviving tensor bytes plus
    // small overhead.
    EXPECT_LT(bytes, (100000 + 100002 + 100004) * 105 / 100);
    return out;
  };
  const auto before = chunk_files();
  EXPECT_EQ(before.size(), 9u);  // 3 surviving checkpoints x 3 writers
  for (const auto& [name, level] : before) EXPECT_EQ(level, 6) << name;
  {
    auto store = Store::Open(
        dir.path(), {});  // read-write reopen: leftover scan, no rewrite
    ASSERT_TRUE(store.ok());
    EXPECT_EQ(ReadAll(**store, saved[4]), std::string(100004, 'e'));
  }
  EXPECT_EQ(chunk_files(), before);
}

}  // namespace
}  // namespace ckptdb::storage

namespace ckptdb::storage {
namespace {

TEST(StoreTest, CreatesMissingParentDirectories) {
  TempDir dir;
  auto store = Store::Open(dir.Sub("a/b/c"), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(std::filesystem::exists(dir.Sub("a/b/c/CURRENT")));
}

TEST(StoreTest, RejectsOtherRocksDBDatabases) {
  TempDir dir;
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
  ASSERT_TRUE(raw->Put(rocksdb::WriteOptions(), "k", "v").ok());
  delete raw;
  auto store = Store::Open(dir.path(), {});
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(store.status().IsInvalidArgument());
  EXPECT_NE(store.status().message().find(
                "is a RocksDB database but not a ckptdb store"),
            std::string::npos)
      << store.status().ToString();
}

}  // namespace
}  // namespace ckptdb::storage

namespace ckptdb::storage {
namespace {

TEST(StoreTest, AnInterruptedCreationIsRedone) {
  TempDir dir;
  // What a crash between RocksDB's creation and ckptdb's column families
  // leaves.
  std::ofstream(dir.Sub("CKPTDB_CREATING")).flush();
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
  delete raw;
  StoreOptions ro;
  ro.read_only = true;
  auto read_only = Store::Open(dir.path(), ro);
  EXPECT_TRUE(read_only.status().IsNotFound());
  EXPECT_NE(read_only.status().message().find("interrupted"),
            std::string::npos);
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE((*store)->List()->empty());
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("CKPTDB_CREATING")));
  ASSERT_TRUE(SaveBytes(**store, "after", 1).ok());
}

// A reader that learned a checkpoint's chunks before another handle deleted
// it, then re-opened, is told the checkpoint is gone (NotFound), not that the
// store is damaged. A chunk missing under a checkpoint that is still listed
// stays Corruption.
TEST(StoreTest, ReadingACheckpointDeletedMeanwhileIsNotFound) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(SaveBytes(**writer, "abcdef", 2).ok());
  StoreOptions ro;
  ro.read_only = true;
  auto reader = Store::Open(dir.path(), ro);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto meta = (*reader)->GetMetadata(1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  ASSERT_TRUE((*writer)->Delete(1).ok());
  ASSERT_TRUE((*reader)->Refresh().ok());
  const ChunkMetadata& chunk = meta->tensors.at("w").chunks[0];
  auto read = (*reader)->ReadChunk(1, "w", chunk);
  EXPECT_TRUE(read.status().IsNotFound()) << read.status().ToString();
  EXPECT_NE(read.status().message().find("was deleted while it was read"),
            std::string::npos)
      << read.status().ToString();

  // A listed checkpoint whose chunk is not where its record says: damage.
  auto kept = SaveBytes(**writer, "ghijkl", 2);
  ASSERT_TRUE(kept.ok());
  ChunkMetadata elsewhere = kept->tensors.at("w").chunks[0];
  elsewhere.global_offset = {1};
  ASSERT_TRUE((*reader)->Refresh().ok());
  auto missing = (*reader)->ReadChunk(kept->info.id, "w", elsewhere);
  EXPECT_TRUE(missing.status().IsCorruption()) << missing.status().ToString();
}

}  // namespace
}  // namespace ckptdb::storage

namespace ckptdb::storage {
namespace {

namespace fs = std::filesystem;

std::string Pattern(size_t n, uint32_t seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<char>(((i + seed) * 2654435761u) >> 13);
  return out;
}

// Files under `dir` with extension `ext`, and their total size.
std::pair<int, uint64_t> FilesWith(const std::string& dir,
                                   const std::string& ext) {
  std::pair<int, uint64_t> out{0, 0};
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ext) continue;
    ++out.first;
    out.second += e.file_size();
  }
  return out;
}

// The value file of writer `rank` (part 0) of checkpoint `id`; "" when none.
std::string ValueFileOfRank(const std::string& dir, int64_t id, int rank) {
  std::error_code ec;
  const std::string prefix = std::to_string(rank) + "-0-";
  for (const auto& e : fs::directory_iterator(ValueDirOf(dir, id), ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0)
      return e.path().string();
  }
  return "";
}

// Large chunks live in value files, one per writer's staged file, and the
// table files hold no run of their bytes; every read path returns them
// exactly, and deleting the checkpoint removes its value directory.
TEST(ValueFileTest, LargeChunksLiveInValueFilesThatDeleteRemoves) {
  TempDir dir;
  const std::string payload = Pattern(1 << 20, 1);
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  auto meta = SaveBytes(**store, payload, 2);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  const std::string values = ValueDirOf(dir.path(), meta->info.id);
  EXPECT_EQ(FilesWith(values, ".val"),
            (std::pair<int, uint64_t>{2, payload.size()}));
  for (const auto& e : fs::directory_iterator(dir.path())) {
    if (e.path().extension() != ".sst") continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(bytes.find(payload.substr(5000, 256)), std::string::npos)
        << e.path();
  }
  EXPECT_TRUE(ReadAll(**store, *meta) == payload);
  std::string into(payload.size(), '\0');
  for (const auto& chunk : meta->tensors.at("w").chunks) {
    ASSERT_TRUE((*store)
                    ->ReadChunkInto(meta->info.id, "w", chunk,
                                    into.data() + chunk.global_offset[0])
                    .ok());
    EXPECT_TRUE((*store)->VerifyChunk(meta->info.id, "w", chunk).ok());
  }
  EXPECT_TRUE(into == payload);
  ASSERT_TRUE((*store)->Delete(meta->info.id).ok());
  EXPECT_FALSE(fs::exists(values));
  EXPECT_EQ(FilesWith(dir.path(), ".val").first, 0);
}

// A value file that is missing, cut short or damaged makes every read of its
// chunks Corruption naming the chunk and the file; the other writer's chunks
// still read.
TEST(ValueFileTest, AMissingCutOrDamagedValueFileIsCorruptionNamingIt) {
  for (const std::string how : {"remove", "truncate", "flip"}) {
    TempDir dir;
    const std::string payload = Pattern(1 << 20, 2);
    CheckpointMetadata meta;
    {
      auto store = Store::Open(dir.path(), {});
      ASSERT_TRUE(store.ok());
      auto saved = SaveBytes(**store, payload, 2);
      ASSERT_TRUE(saved.ok());
      meta = *saved;
    }
    const std::string file = ValueFileOfRank(dir.path(), meta.info.id, 1);
    ASSERT_TRUE(fs::exists(file));
    if (how == "remove") {
      fs::remove(file);
    } else if (how == "truncate") {
      fs::resize_file(file, fs::file_size(file) - 1);
    } else {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(1234);
      f.put('\x7f');
    }
    for (bool read_only : {true, false}) {
      auto store = Store::Open(dir.path(), {.read_only = read_only});
      ASSERT_TRUE(store.ok()) << how << ": " << store.status().ToString();
      for (const auto& chunk : meta.tensors.at("w").chunks) {
        std::string into(chunk.nbytes, '\0');
        const Status read =
            (*store)->ReadChunkInto(meta.info.id, "w", chunk, into.data());
        const Status verified = (*store)->VerifyChunk(meta.info.id, "w", chunk);
        const auto buffer = (*store)->ReadChunk(meta.info.id, "w", chunk);
        if (chunk.writer_rank == 0) {
          EXPECT_TRUE(read.ok() && verified.ok() && buffer.ok()) << how;
          continue;
        }
        for (const Status& s : {read, verified, buffer.status()}) {
          EXPECT_TRUE(s.IsCorruption()) << how << ": " << s.ToString();
          EXPECT_NE(s.message().find("tensor 'w' at offset ["),
                    std::string::npos)
              << s.ToString();
          EXPECT_NE(s.message().find(file), std::string::npos) << s.ToString();
        }
      }
    }
  }
}

// Rank 0 refuses to commit staged files whose value file is gone or short,
// naming it; nothing of the checkpoint stays.
TEST(ValueFileTest, CommitRefusesAStagedFileWhoseValueFileIsGone) {
  for (bool cut : {false, true}) {
    TempDir dir;
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    const std::string payload = Pattern(256 << 10, 3);
    ASSERT_TRUE(SaveBytes(**store, payload, 1).ok());
    const int64_t id = *(*store)->NextCheckpointId();
    CheckpointMetadata meta;
    meta.info.id = id;
    meta.info.world_size = 1;
    meta.info.num_tensors = 1;
    meta.info.nbytes = static_cast<int64_t>(payload.size());
    TensorMetadata& t = meta.tensors["w"];
    t.dtype = DType::kUInt8;
    t.global_shape = {static_cast<int64_t>(payload.size())};
    meta.flat_mapping["w"] = {"w"};
    auto writer = (*store)->NewStagedFile(id, 0, 0);
    ASSERT_TRUE(writer.ok());
    auto sum = (*writer)->Add("w", {0}, payload);
    ASSERT_TRUE(sum.ok());
    t.chunks.push_back({{0}, {t.global_shape[0]}, 0, payload.size(), *sum});
    auto staged = (*writer)->Finish();
    ASSERT_TRUE(staged.ok());
    const std::string file = ValueFileOfRank(dir.path(), id, 0);
    ASSERT_FALSE(file.empty());
    if (cut)
      fs::resize_file(file, payload.size() - 1);
    else
      fs::remove(file);
    const Status committed = (*store)->Commit(meta, {*staged});
    EXPECT_TRUE(committed.IsIOError()) << committed.ToString();
    EXPECT_NE(committed.message().find(file), std::string::npos)
        << committed.ToString();
    EXPECT_EQ((*store)->List()->size(), 1u);
    (*store)->RemoveStaged({*staged});
    store->reset();
    store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    EXPECT_EQ((*store)->List()->size(), 1u);
    EXPECT_FALSE(fs::exists(ValueDirOf(dir.path(), id)));
  }
}

// Value directories that no table file reaches (an interrupted save or
// delete) are reported by Check and removed by a read-write open; those of
// live checkpoints, and unrelated names, are kept.
TEST(ValueFileTest, OpenRemovesValueFilesThatNoChunkReaches) {
  TempDir dir;
  const std::string payload = Pattern(512 << 10, 4);
  CheckpointMetadata meta;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    auto saved = SaveBytes(**store, payload, 2);
    ASSERT_TRUE(saved.ok());
    meta = *saved;
  }
  const std::string orphan = ValueDirOf(dir.path(), 7);
  fs::create_directories(orphan);
  std::ofstream(orphan + "/0-0-12345678.val") << "left by a save that died";
  {
    auto store = Store::Open(dir.path(), {.read_only = true});
    ASSERT_TRUE(store.ok());
    auto report = (*store)->Check();
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->unused_value_ids, std::vector<int64_t>{7});
    EXPECT_TRUE(fs::exists(orphan));
  }
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_TRUE((*store)->Check()->unused_value_ids.empty());
  EXPECT_TRUE(ReadAll(**store, meta) == payload);
}

// The value files of a save that fails after writing them stay while it may
// have committed (RemoveStaged leaves them); the next save's
// NextCheckpointId removes them, since no table file holds their keys.
// Abandoned writers remove their own.
TEST(ValueFileTest, ValueFilesOfAFailedSaveGoWhenTheNextSaveStarts) {
  TempDir dir;
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  const std::string payload = Pattern(128 << 10, 5);
  {
    auto writer = (*store)->NewStagedFile(1, 0, 0);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Add("w", {0}, payload).ok());
    EXPECT_EQ(FilesWith(dir.path(), ".val").first, 1);
    (*writer)->Abandon();
    EXPECT_EQ(FilesWith(dir.path(), ".val").first, 0);
  }
  auto writer = (*store)->NewStagedFile(1, 3, 2);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Add("w", {0}, payload).ok());
  auto staged = (*writer)->Finish();
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(FilesWith(dir.path(), ".val"),
            (std::pair<int, uint64_t>{1, payload.size()}));
  (*store)->RemoveStaged({*staged});
  EXPECT_EQ(FilesWith(dir.path(), ".val").first, 1);
  EXPECT_EQ((*store)->Check()->unused_value_ids, std::vector<int64_t>{1});
  EXPECT_EQ(*(*store)->NextCheckpointId(), 1);
  EXPECT_EQ(FilesWith(dir.path(), ".val").first, 0);
  EXPECT_FALSE(fs::exists(ValueDirOf(dir.path(), 1)));
}

// A chunk whose own bytes look like a pointer (32 bytes, the pointer's magic)
// is stored and read as the bytes it is.
TEST(ValueFileTest, AChunkThatLooksLikeAPointerIsJustBytes) {
  TempDir dir;
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  const std::string lookalike = EncodeValuePointer({0, 7, 0, 0, 1 << 20});
  auto meta = SaveBytes(**store, lookalike, 1);
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_TRUE(ReadAll(**store, *meta) == lookalike);
  const ChunkMetadata& chunk = meta->tensors.at("w").chunks[0];
  EXPECT_TRUE((*store)->VerifyChunk(meta->info.id, "w", chunk).ok());
  EXPECT_FALSE(fs::exists(ValuesDir(dir.path())));
}

// A reader that still sees a deleted checkpoint's table files (no Refresh)
// finds its value files gone: NotFound, as for any read that races a delete,
// not Corruption.
TEST(ValueFileTest, AReadThatRacesADeleteIsNotFound) {
  TempDir dir;
  auto writer = Store::Open(dir.path(), {});
  ASSERT_TRUE(writer.ok());
  auto saved = SaveBytes(**writer, Pattern(256 << 10, 6), 1);
  ASSERT_TRUE(saved.ok());
  auto reader = Store::Open(dir.path(), {.read_only = true});
  ASSERT_TRUE(reader.ok());
  const ChunkMetadata& chunk = saved->tensors.at("w").chunks[0];
  ASSERT_TRUE((*reader)->VerifyChunk(saved->info.id, "w", chunk).ok());
  ASSERT_TRUE((*writer)->Delete(saved->info.id).ok());
  ASSERT_FALSE(fs::exists(ValueDirOf(dir.path(), saved->info.id)));
  const Status verified = (*reader)->VerifyChunk(saved->info.id, "w", chunk);
  EXPECT_TRUE(verified.IsNotFound()) << verified.ToString();
  EXPECT_NE(verified.message().find("was deleted while it was read"),
            std::string::npos)
      << verified.ToString();
}

// Something not ckptdb's inside a value directory stays, and neither a delete
// nor an open fails over it.
TEST(ValueFileTest, AForeignEntryInAValueDirectoryBlocksNothing) {
  TempDir dir;
  CheckpointMetadata meta;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(SaveBytes(**store, Pattern(256 << 10, 7), 1).ok());
    auto saved = SaveBytes(**store, Pattern(256 << 10, 8), 1);
    ASSERT_TRUE(saved.ok());
    meta = *saved;
    fs::create_directories(ValueDirOf(dir.path(), 1) + "/not-ckptdb");
    fs::create_directories(ValueDirOf(dir.path(), 9) + "/not-ckptdb");
    ASSERT_TRUE((*store)->Delete(1).ok());
    EXPECT_EQ(FilesWith(ValueDirOf(dir.path(), 1), ".val").first, 0);
  }
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(fs::exists(ValueDirOf(dir.path(), 9) + "/not-ckptdb"));
  EXPECT_TRUE(ReadAll(**store, meta) == Pattern(256 << 10, 8));
  ASSERT_TRUE(SaveBytes(**store, Pattern(256 << 10, 9), 1).ok());
}

// Stores written before value files hold large chunks in their table files:
// every read path still returns them (directly where they start a block), and
// a store holding both layouts reads and deletes both.
TEST(ValueFileTest, LargeChunksInTableFilesStillRead) {
  TempDir dir;
  const std::string old_bytes = Pattern(3 << 20, 10);
  const std::string new_bytes = Pattern(1 << 20, 11);
  CheckpointMetadata old_meta, new_meta;
  {
    auto store = Store::Open(dir.path(), {.value_files = false});
    ASSERT_TRUE(store.ok());
    auto saved = SaveBytes(**store, old_bytes, 3);
    ASSERT_TRUE(saved.ok());
    old_meta = *saved;
    EXPECT_FALSE(fs::exists(ValuesDir(dir.path())));
  }
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok());
    auto saved = SaveBytes(**store, new_bytes, 2);
    ASSERT_TRUE(saved.ok());
    new_meta = *saved;
  }
  for (bool read_only : {true, false}) {
    auto store = Store::Open(dir.path(), {.read_only = read_only});
    ASSERT_TRUE(store.ok());
    for (const auto* meta : {&old_meta, &new_meta}) {
      const std::string& bytes = meta == &old_meta ? old_bytes : new_bytes;
      EXPECT_TRUE(ReadAll(**store, *meta) == bytes);
      std::string into(bytes.size(), '\0');
      for (const auto& chunk : meta->tensors.at("w").chunks) {
        auto buffer = (*store)->ReadChunk(meta->info.id, "w", chunk);
        ASSERT_TRUE(buffer.ok());
        EXPECT_TRUE(buffer->read_directly());
        ASSERT_TRUE((*store)
                        ->ReadChunkInto(meta->info.id, "w", chunk,
                                        into.data() + chunk.global_offset[0])
                        .ok());
        EXPECT_TRUE((*store)->VerifyChunk(meta->info.id, "w", chunk).ok());
      }
      EXPECT_TRUE(into == bytes);
    }
  }
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Delete(old_meta.info.id).ok());
  ASSERT_TRUE((*store)->Delete(new_meta.info.id).ok());
  EXPECT_EQ(FilesWith(dir.path(), ".val").first, 0);
  EXPECT_TRUE((*store)->List()->empty());
}

// A value file whose sync, or the sync of a directory naming it, fails fails
// the save before its commit: nothing of it is listed, now or after a reopen.
TEST(ValueFileTest, EveryValueFileSyncIsCheckedBeforeTheCommit) {
  struct Case {
    FileOp op;
    const char* path;
    int nth;
  };
  for (const Case& c :
       {Case{FileOp::kSync, ".val", 1}, Case{FileOp::kSyncDir, "/values", 1},
        Case{FileOp::kSyncDir, "/values", 2}}) {
    const std::string ctx = std::string(FileOpName(c.op)) + " " + c.path +
                            " #" + std::to_string(c.nth);
    TempDir dir;
    auto faults = std::make_shared<FaultInjector>();
    {
      auto store = Store::Open(dir.path(), {.fault_injector = faults});
      ASSERT_TRUE(store.ok());
      ASSERT_TRUE(SaveBytes(**store, Pattern(256 << 10, 12), 1).ok());
      faults->Arm(
          {.nth = c.nth, .ops = FileOpMask(c.op), .path_contains = c.path});
      auto failed = SaveBytes(**store, Pattern(256 << 10, 13), 1);
      EXPECT_FALSE(failed.ok()) << ctx;
      EXPECT_EQ(faults->injected().size(), 1u) << ctx;
      EXPECT_TRUE(failed.status().IsIOError())
          << ctx << ": " << failed.status().ToString();
      faults->Disarm();
      EXPECT_EQ((*store)->List()->size(), 1u) << ctx;
    }
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok()) << ctx;
    EXPECT_EQ((*store)->List()->size(), 1u) << ctx;
  }
}

}  // namespace
}  // namespace ckptdb::storage
