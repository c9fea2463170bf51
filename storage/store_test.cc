#include "storage/store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>

#include "storage/keys.h"
#include "storage/store_testing.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::FaultInjector;
using ckptdb::testing::FaultRule;
using ckptdb::testing::TempDir;
using testing::CommitLogLine;
using testing::ReadAll;
using testing::SaveBytes;

// Flips one byte inside the first run of 4096 `fill` bytes of a table or value
// file of the store at `dir`: one chunk's value is damaged.
bool DamageOneChunk(const std::string& dir, char fill) {
  return ckptdb::testing::DamageStoredBytes(dir, std::string(4096, fill), 100,
                                            1, /*first_file_only=*/true);
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
    for (const auto& file :
         ckptdb::testing::FilesUnder(dir.Sub("s"), {".sst"})) {
      const std::string bytes =
          ckptdb::testing::ReadIfPresent(file.path).value_or("");
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
    return static_cast<int>(
        ckptdb::testing::FilesUnder(dir.path(), {".log"}).size());
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

TEST(StoreTest, EachCommitWritesBothCopiesAndLogsTheTimeOfItsSteps) {
  TempDir dir;
  {
    auto store = Store::Open(dir.path(), {});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE(SaveBytes(**store, std::string(3000, 'c'), 2).ok());
    ASSERT_TRUE(SaveBytes(**store, std::string(5000, 'd'), 1).ok());
  }
  for (const char* copy : {"1.rec", "1.loc", "2.rec", "2.loc"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/copies/" + copy))
        << copy;
  }
  for (int id : {1, 2}) {
    const std::string rest = CommitLogLine(dir.path(), id);
    ASSERT_FALSE(rest.empty()) << "no commit line for checkpoint " << id;
    for (const char* step : {"ingest ", "records ", "copies ", "journal "})
      EXPECT_NE(rest.find(step), std::string::npos) << rest;
    // Records of a few hundred bytes: the cache at its least.
    EXPECT_NE(rest.find("; metadata cache 8.0 MiB"), std::string::npos) << rest;
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

// The store's own looks at its files (whether the creation marker or a
// journal is there, what a writer changed) go through its file system: a
// failure there is an error naming the operation and the file, never taken
// for an absent file.
// Opens a saved store with every stat of a path containing `file` failing:
// the open fails with an IOError naming the look at that file, and succeeds
// once the fault is gone.
void ExpectAFailedLookAtFailsTheOpen(const std::string& file) {
  TempDir dir;
  testing::SavedIn(dir.path(), "abc", 1);
  auto faults = std::make_shared<FaultInjector>();
  faults->Arm({.nth = 1,
               .from_nth_on = true,
               .ops = FileOpMask(FileOp::kStat),
               .path_contains = file});
  StoreOptions options;
  options.file_system_hooks = faults;
  auto store = Store::Open(dir.path(), options);
  ASSERT_FALSE(store.ok());
  EXPECT_TRUE(store.status().IsIOError()) << store.status().ToString();
  EXPECT_NE(store.status().message().find("checking whether " + dir.path() +
                                          "/" + file),
            std::string::npos)
      << store.status().ToString();
  faults->Disarm();
  EXPECT_TRUE(Store::Open(dir.path(), options).ok());
}

TEST(StoreTest, AFailedLookForTheCreationMarkerFailsTheOpenNamingIt) {
  ExpectAFailedLookAtFailsTheOpen("CKPTDB_CREATING");
}

TEST(StoreTest, AFailedLookForTheJournalFailsTheOpenNamingIt) {
  ExpectAFailedLookAtFailsTheOpen("CKPTDB_JOURNAL");
}

// Once a table file is linked into the database (a commit's ingestion of
// its staged chunks), every later change of the store fails: the disk went
// away.
class FailFromTheFirstIngestOn : public FileSystemHooks {
 public:
  int BeforeOperation(FileOp op, std::string_view path, uint64_t) override {
    if (!armed) return 0;
    if (op == FileOp::kLink && path.ends_with(".sst")) failing = true;
    return failing && (FileOpMask(op) & kMutatingFileOps) ? EIO : 0;
  }
  std::atomic<bool> armed{false};
  std::atomic<bool> failing{false};
};

// A commit whose ingestion fails cannot have taken effect (its records were
// never written), and says so even when reopening the store fails too; the
// store then holds the checkpoints before it, and the id is used again.
TEST(StoreTest,
     ACommitThatFailsIngestingSaysItIsNotCommittedWhenTheReopenFails) {
  TempDir dir;
  auto hooks = std::make_shared<FailFromTheFirstIngestOn>();
  {
    auto store = Store::Open(dir.path(), {.file_system_hooks = hooks});
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(SaveBytes(**store, "kept", 1).ok());
    hooks->armed = true;
    auto failed = SaveBytes(**store, "lost", 1);
    ASSERT_FALSE(failed.ok());
    ASSERT_TRUE(hooks->failing);
    const std::string message = failed.status().message();
    EXPECT_EQ(message.find("may have taken effect"), std::string::npos)
        << message;
    EXPECT_NE(message.find("checkpoint 2 is not committed"), std::string::npos)
        << message;
    EXPECT_NE(message.find("reopening the store failed too"), std::string::npos)
        << message;
    hooks->armed = false;
  }
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_EQ((*store)->List()->size(), 1u);
  EXPECT_EQ((*store)->NextCheckpointId().value(), 2);
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
                                      into.data() + chunk.box.origin[0])
                      .ok());
    }
    EXPECT_TRUE(whole == payload) << read_only;
    EXPECT_TRUE(into == payload) << read_only;
  }
}

// Commits checkpoint 1 of one tensor "w" (uint8) made of chunks of `sizes`
// bytes, in order, in one staged file, byte k of the chunk at offset o being
// (o * 7 + k) mod 256; `*all` gets the tensor's bytes and `*meta` its record.
void CommitChunksInOneFile(Store& store, const std::vector<int64_t>& sizes,
                           CheckpointMetadata* meta, std::string* all) {
  meta->info.id = 1;
  meta->info.world_size = 1;
  TensorMetadata& t = meta->tensors["w"];
  t.dtype = DType::kUInt8;
  meta->flat_mapping["w"] = {"w"};
  auto writer = store.NewStagedFile(1, 0, 0);
  ASSERT_TRUE(writer.ok());
  for (int64_t n : sizes) {
    const int64_t at = static_cast<int64_t>(all->size());
    std::string bytes(static_cast<size_t>(n), '\0');
    for (size_t k = 0; k < bytes.size(); ++k)
      bytes[k] = static_cast<char>(static_cast<size_t>(at) * 7 + k);
    auto sum = (*writer)->Add("w", {at}, bytes);
    ASSERT_TRUE(sum.ok());
    t.chunks.push_back({Box{{at}, {n}}, 0, static_cast<uint64_t>(n), *sum});
    *all += bytes;
  }
  t.global_shape = {static_cast<int64_t>(all->size())};
  auto file = (*writer)->Finish();
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(store.Commit(*meta, {*file}).ok());
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
  std::string all;
  ASSERT_NO_FATAL_FAILURE(CommitChunksInOneFile(**store, sizes, &meta, &all));
  const TensorMetadata& t = meta.tensors.at("w");
  std::string into(all.size(), '\0');
  for (const auto& chunk : t.chunks) {
    auto buffer = (*store)->ReadChunk(1, "w", chunk);
    ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
    EXPECT_TRUE(buffer->bytes() == std::string_view(all).substr(
                                       chunk.box.origin[0], chunk.nbytes));
    if (chunk.nbytes == (300 << 10) || chunk.nbytes == (700 << 10)) {
      EXPECT_TRUE(buffer->read_directly()) << chunk.nbytes;
    }
    ASSERT_TRUE(
        (*store)
            ->ReadChunkInto(1, "w", chunk, into.data() + chunk.box.origin[0])
            .ok());
    // Scattered: pieces of every size down to 0 bytes, more of them than one
    // preadv takes, each written after a gap.
    std::deque<std::string> held;  // grows without moving its strings
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
    EXPECT_TRUE(joined ==
                std::string_view(all).substr(chunk.box.origin[0], chunk.nbytes))
        << chunk.nbytes << " bytes in " << pieces.size() << " pieces";
  }
  EXPECT_TRUE(into == all);
  // Together: every chunk, then the small ones only (read around the large
  // ones between them), in reverse order, each in pieces after gaps.
  for (bool small_only : {false, true}) {
    std::deque<std::string> held;  // grows without moving its strings
    std::deque<std::vector<ChunkPiece>> places;  // likewise
    std::vector<ChunkToRead> reads;
    for (auto c = t.chunks.rbegin(); c != t.chunks.rend(); ++c) {
      if (small_only && c->nbytes > 1000) continue;
      const size_t half = c->nbytes / 2;
      held.emplace_back(half + 3, '#');
      held.emplace_back(c->nbytes - half + 3, '#');
      places.push_back({{held[held.size() - 2].data() + 3, half},
                        {held.back().data() + 3, c->nbytes - half}});
      reads.push_back(ChunkToRead{"w", &*c, places.back()});
    }
    ASSERT_TRUE((*store)->ReadChunksScattered(1, reads).ok());
    for (const ChunkToRead& read : reads) {
      std::string joined;
      for (const ChunkPiece& p : read.pieces) joined.append(p.data, p.size);
      EXPECT_TRUE(joined == std::string_view(all).substr(
                                read.chunk->box.origin[0], read.chunk->nbytes))
          << read.chunk->nbytes << " bytes, small only " << small_only;
    }
  }
}

// Counts the reads of table files.
class TableReads : public FileSystemHooks {
 public:
  int BeforeOperation(FileOp op, std::string_view path, uint64_t) override {
    if (op == FileOp::kRead && path.ends_with(".sst")) ++reads;
    return 0;
  }
  std::atomic<int> reads{0};
};

// Many small chunks side by side, read together: more of them than one
// preadv takes pieces, each chunk's bytes where they belong, with a few reads
// of their table file, not one per chunk.
TEST(StoreTest, ManySmallChunksReadTogetherLandExactly) {
  TempDir dir;
  auto hooks = std::make_shared<TableReads>();
  auto store = Store::Open(dir.path(), {.file_system_hooks = hooks});
  ASSERT_TRUE(store.ok());
  std::vector<int64_t> sizes;
  for (int i = 0; i < 3000; ++i) sizes.push_back(1 + i % 97);
  CheckpointMetadata meta;
  std::string all;
  ASSERT_NO_FATAL_FAILURE(CommitChunksInOneFile(**store, sizes, &meta, &all));
  const TensorMetadata& t = meta.tensors.at("w");
  std::string into(all.size(), '\0');
  std::vector<ChunkPiece> places;
  for (const auto& chunk : t.chunks)
    places.push_back({into.data() + chunk.box.origin[0], chunk.nbytes});
  std::vector<ChunkToRead> reads;
  for (size_t c = 0; c < t.chunks.size(); ++c)
    reads.push_back({"w", &t.chunks[c], {&places[c], 1}});
  hooks->reads = 0;
  ASSERT_TRUE((*store)->ReadChunksScattered(1, reads).ok());
  EXPECT_TRUE(into == all);
  // 3000 chunks of 1-97 bytes, two iovecs each: 6 reads of IOV_MAX iovecs.
  EXPECT_LE(hooks->reads, 10);
  EXPECT_GE(hooks->reads, 1);
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
    const ChunkPiece whole{into.data(), chunk.nbytes};
    Status together = (*store)->ReadChunksScattered(
        meta.info.id, {{"w", &chunk, {&whole, 1}}});
    EXPECT_EQ(together.ok(), direct.ok());
    EXPECT_EQ(together.IsCorruption(), direct.IsCorruption());
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
  // Read together, the damaged chunk fails the call, naming its key.
  const auto& chunks = meta.tensors.at("w").chunks;
  std::vector<std::string> places(chunks.size());
  std::vector<ChunkPiece> pieces(chunks.size());
  std::vector<ChunkToRead> reads;
  for (size_t c = 0; c < chunks.size(); ++c) {
    places[c].resize(chunks[c].nbytes);
    pieces[c] = {places[c].data(), chunks[c].nbytes};
    reads.push_back({"w", &chunks[c], {&pieces[c], 1}});
  }
  Status together = (*store)->ReadChunksScattered(meta.info.id, reads);
  EXPECT_TRUE(together.IsCorruption()) << together.ToString();
  EXPECT_NE(together.message().find("'w'"), std::string::npos)
      << together.ToString();
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
    std::map<std::string, int> out;  // file name -> level
    uint64_t bytes = 0;
    for (const auto& f : testing::TableFiles(dir.path(), "chunks")) {
      out[f.name] = f.level;
      bytes += f.size;
    }
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

}  // namespace
}  // namespace ckptdb::storage
