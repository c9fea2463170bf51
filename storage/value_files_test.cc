#include "storage/value_files.h"

#include <gtest/gtest.h>
#include <rocksdb/table_properties.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "storage/chunk_files.h"
#include "storage/store_testing.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

namespace fs = std::filesystem;
using ckptdb::testing::FaultInjector;
using ckptdb::testing::TempDir;
using testing::FilesWith;
using testing::Pattern;
using testing::ReadAll;
using testing::SaveBytes;
using testing::SavedIn;

TEST(ValuePointerTest, RoundTripsAndRejectsEverythingElse) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    ValuePointer p{static_cast<int32_t>(rng() % 100000),
                   static_cast<uint32_t>(rng() % 64),
                   static_cast<uint32_t>(rng()), rng() >> 2, rng() >> 2};
    const std::string bytes = EncodeValuePointer(p);
    ASSERT_EQ(bytes.size(), kValuePointerBytes);
    auto back = DecodeValuePointer(bytes);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->rank, p.rank);
    EXPECT_EQ(back->part, p.part);
    EXPECT_EQ(back->nonce, p.nonce);
    EXPECT_EQ(back->offset, p.offset);
    EXPECT_EQ(back->nbytes, p.nbytes);
    // Any single flipped bit of the magic, a shorter or longer value: not a
    // pointer.
    for (size_t at : {0, 1, 2, 3}) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ (1 << (rng() % 8)));
      EXPECT_FALSE(DecodeValuePointer(bad).has_value()) << at;
    }
    EXPECT_FALSE(DecodeValuePointer(bytes.substr(1)).has_value());
    EXPECT_FALSE(DecodeValuePointer(bytes + '\0').has_value());
  }
  // A negative rank, or an end past 2^64.
  EXPECT_FALSE(DecodeValuePointer(EncodeValuePointer({-1, 0, 0, 0, 1})));
  EXPECT_FALSE(
      DecodeValuePointer(EncodeValuePointer({0, 0, 0, ~uint64_t{0}, 2})));
}

TEST(ValueFileNamesTest, DirectoriesAreCheckpointIds) {
  int64_t id = 0;
  EXPECT_TRUE(ParseValueDirName("42", &id));
  EXPECT_EQ(id, 42);
  for (const char* bad : {"", "0", "-1", "4a", "..", "42.tmp",
                          "1234567890123456789", "99999999999999999999"}) {
    EXPECT_FALSE(ParseValueDirName(bad, &id)) << bad;
  }
  EXPECT_EQ(ValueFileName(7, {3, 1, 0xbeef}), "7/3-1-0000beef.val");
  EXPECT_EQ(ValueFilePath("/s", 7, {3, 1, 0xbeef}),
            "/s/values/7/3-1-0000beef.val");
}

TEST(ValueFileNamesTest, AFileNameGivesBackItsCheckpointRankPartAndNonce) {
  for (const ValuePointer& named :
       {ValuePointer{3, 1, 0xbeef}, ValuePointer{0, 0, 0},
        ValuePointer{INT32_MAX, UINT32_MAX, UINT32_MAX}}) {
    const std::string name = ValueFileName(12, named);
    int64_t id = 0;
    const std::optional<ValuePointer> parsed = ParseValueFileName(name, &id);
    ASSERT_TRUE(parsed) << name;
    EXPECT_EQ(id, 12);
    EXPECT_EQ(parsed->rank, named.rank) << name;
    EXPECT_EQ(parsed->part, named.part) << name;
    EXPECT_EQ(parsed->nonce, named.nonce) << name;
  }
  int64_t id = 0;
  for (const char* bad :
       {"", "7", "7/", "7/3-1-0000beef", "7/3-1-beef.val",
        "7/03-1-0000beef.val", "7/3-1-0000BEEF.val", "7/-3-1-0000beef.val",
        "0/3-1-0000beef.val", "7/3-1-2-0000beef.val", "7/3--0000beef.val",
        "7/3-1-0000beef.val/x", "x/3-1-0000beef.val",
        "7/2147483648-1-0000beef.val", "7/3-1-00000beef.val"}) {
    EXPECT_FALSE(ParseValueFileName(bad, &id)) << bad;
  }
}

// Writes `bytes` bytes to `path`, creating its directories.
void WriteFile(const std::string& path, size_t bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << std::string(bytes, 'v');
}

TEST(ValueDirectoriesTest, ListsTheDirectoriesNamedForCheckpointsInOrder) {
  TempDir dir;
  StoreFileSystem files(nullptr, /*sync=*/false, dir.path());
  ValueDirectories values(files, dir.path());
  auto none = values.Ids();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
  for (const char* name : {"12", "3", "notes", "7.tmp"})
    fs::create_directories(ValuesDir(dir.path()) + "/" + name);
  auto ids = values.Ids();
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(*ids, (std::vector<int64_t>{3, 12}));
  std::vector<std::string> names;
  ASSERT_TRUE(values.List(99, &names).ok());
  EXPECT_TRUE(names.empty());
}

TEST(ValueDirectoriesTest, RemoveTakesValueFilesAndKeepsWhatIsNotCkptdbs) {
  TempDir dir;
  StoreFileSystem files(nullptr, /*sync=*/false, dir.path());
  ValueDirectories values(files, dir.path());
  const std::string four = ValueDirOf(dir.path(), 4);
  const std::string five = ValueDirOf(dir.path(), 5);
  WriteFile(four + "/0-0-00000001.val", 10);
  WriteFile(four + "/1-0-00000002.val", 10);
  WriteFile(five + "/0-0-00000003.val", 10);
  WriteFile(five + "/README", 3);
  EXPECT_TRUE(values.Remove(4).ok());
  EXPECT_FALSE(fs::exists(four));
  EXPECT_TRUE(values.Remove(5).ok());
  EXPECT_FALSE(fs::exists(five + "/0-0-00000003.val"));
  EXPECT_TRUE(fs::exists(five + "/README"));
  EXPECT_TRUE(values.Remove(6).ok()) << "an absent directory is removed";
}

TEST(ValueDirectoriesTest, FindsStrayAndIncompleteValueFiles) {
  TempDir dir;
  StoreFileSystem files(nullptr, /*sync=*/false, dir.path());
  ValueDirectories values(files, dir.path());
  const std::string eight = ValueDirOf(dir.path(), 8);
  WriteFile(eight + "/0-0-00000001.val", 100);
  WriteFile(eight + "/1-0-00000002.val", 100);
  WriteFile(eight + "/notes.txt", 1);
  std::vector<std::string> stray;
  ASSERT_TRUE(values.AddStray(8, {{"8/0-0-00000001.val", 100}}, &stray).ok());
  EXPECT_EQ(stray, std::vector<std::string>{eight + "/1-0-00000002.val"});

  auto whole = values.FirstLoss(
      {{"8/0-0-00000001.val", 100}, {"8/1-0-00000002.val", 40}});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, "");
  auto short_file = values.FirstLoss(
      {{"8/0-0-00000001.val", 100}, {"8/1-0-00000002.val", 101}});
  ASSERT_TRUE(short_file.ok());
  EXPECT_EQ(*short_file, "value file " + eight +
                             "/1-0-00000002.val holds 100 bytes, its chunks "
                             "need 101");
  auto missing = values.FirstLoss({{"8/2-0-00000003.val", 1}});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(*missing, "value file " + eight + "/2-0-00000003.val is missing");
}

// The value file a table file names comes from the store, which may come
// from anywhere: only a name of the form <id>/<rank>-<part>.val is used.
TEST(ValueFileNamesTest, ATableFileNamesOnlyAValueFileInsideTheStore) {
  auto named = [](const std::string& name) {
    rocksdb::TableProperties props;
    std::string value = name;
    value.push_back('\0');
    value.append(8, '\x01');
    props.user_collected_properties["ckptdb.chunk-value-file"] = value;
    return ValueFileOf(props);
  };
  auto ok = named("12/3-0-00c0ffee.val");
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->name, "12/3-0-00c0ffee.val");
  EXPECT_EQ(ok->end, 0x0101010101010101u);
  for (const char* bad : {"../../etc/passwd", "12/../../x.val", "/12/3-0.val",
                          "12/3-0.sst", "3-0.val", "1/2/3-0.val", ""}) {
    EXPECT_FALSE(named(bad).has_value()) << bad;
  }
  EXPECT_FALSE(ValueFileOf(rocksdb::TableProperties()).has_value());
}

// Two attempts at the same checkpoint id (a failed save's id is given out
// again) write different files: a writer left over from the first (a process
// of a job that died) can neither truncate nor remove the second's.
TEST(ValueFileWriterTest, AttemptsAtOneIdNeverShareAFile) {
  TempDir dir;
  auto fs = std::make_shared<StoreFileSystem>(nullptr);
  ValueFileWriter old_attempt(fs, dir.path(), 5, 1, 0);
  ValueFileWriter new_attempt(fs, dir.path(), 5, 1, 0);
  EXPECT_NE(old_attempt.path(), new_attempt.path());
  const std::string bytes(128 << 10, 'n');
  ASSERT_TRUE(new_attempt.Append(bytes).ok());
  ASSERT_TRUE(new_attempt.Finish().ok());
  ASSERT_TRUE(old_attempt.Append(std::string(64 << 10, 'o')).ok());
  old_attempt.Abandon();
  EXPECT_FALSE(std::filesystem::exists(old_attempt.path()));
  std::ifstream in(new_attempt.path(), std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)), {});
  EXPECT_TRUE(got == bytes);
}

// The value file of writer `rank` (part 0) of checkpoint `id`; "" when none.
std::string ValueFileOfRank(const std::string& dir, int64_t id, int rank) {
  const std::string prefix = std::to_string(rank) + "-0-";
  for (const auto& file : ckptdb::testing::FilesUnder(ValueDirOf(dir, id))) {
    if (file.path.filename().string().rfind(prefix, 0) == 0)
      return file.path.string();
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
  for (const auto& file : ckptdb::testing::FilesUnder(dir.path(), {".sst"})) {
    const std::string bytes =
        ckptdb::testing::ReadIfPresent(file.path).value_or("");
    EXPECT_EQ(bytes.find(payload.substr(5000, 256)), std::string::npos)
        << file.path;
  }
  EXPECT_TRUE(ReadAll(**store, *meta) == payload);
  std::string into(payload.size(), '\0');
  for (const auto& chunk : meta->tensors.at("w").chunks) {
    ASSERT_TRUE((*store)
                    ->ReadChunkInto(meta->info.id, "w", chunk,
                                    into.data() + chunk.box.origin[0])
                    .ok());
    EXPECT_TRUE((*store)->VerifyChunk(meta->info.id, "w", chunk).ok());
  }
  EXPECT_TRUE(into == payload);
  ASSERT_TRUE((*store)->Delete(meta->info.id).ok());
  EXPECT_FALSE(fs::exists(values));
  EXPECT_EQ(FilesWith(dir.path(), ".val").first, 0);
}

// A chunk added unless unchanged is hashed as it is written: a changed one
// (large or small) is stored with the checksum and content hash of its bytes;
// an unchanged one leaves no key and no bytes, even between two stored
// chunks of one value file; a writer whose every chunk was unchanged leaves no
// file at all.
TEST(ValueFileTest, AChunkFoundUnchangedAsItIsWrittenLeavesNothingBehind) {
  TempDir dir;
  auto store = Store::Open(dir.path(), {});
  ASSERT_TRUE(store.ok());
  const int64_t id = *(*store)->NextCheckpointId();
  struct Case {
    std::string key;
    std::string bytes;
    bool unchanged;
  };
  const std::vector<Case> cases = {
      {"a", Pattern(300 << 10, 1), false},
      {"b", Pattern(200 << 10, 2), true},
      {"c", Pattern(kDigestBlockBytes + 5, 3), false},
      {"d", Pattern(1000, 4), true},
      {"e", Pattern(1000, 5), false}};
  auto writer = (*store)->NewStagedFile(id, 0, 0);
  ASSERT_TRUE(writer.ok());
  CheckpointMetadata meta;
  meta.info.id = id;
  meta.info.world_size = 1;
  uint64_t value_bytes = 0;
  for (const Case& c : cases) {
    const ChunkDigest digest =
        ChunkChecksumAndContentHash(c.bytes.data(), c.bytes.size());
    // A changed chunk is compared with other chunks' hashes, or with none;
    // an unchanged one's hash is among those it is compared with.
    std::vector<ContentHash> compared_with;
    if (c.unchanged) compared_with = {ContentHash{5, 6}, digest.content};
    if (c.key == "c") compared_with = {ContentHash{1, 2}, ContentHash{3, 4}};
    auto added = (*writer)->AddUnlessUnchanged(
        c.key, {0}, c.bytes, [&](const ContentHash& hash) {
          return std::find(compared_with.begin(), compared_with.end(), hash) !=
                 compared_with.end();
        });
    ASSERT_TRUE(added.ok()) << added.status().ToString();
    EXPECT_EQ(added->added, !c.unchanged) << c.key;
    EXPECT_EQ(added->digest.checksum, digest.checksum) << c.key;
    EXPECT_EQ(added->digest.content, digest.content) << c.key;
    if (c.unchanged) continue;
    if (c.bytes.size() >= kExternalValueBytes) value_bytes += c.bytes.size();
    const auto n = static_cast<int64_t>(c.bytes.size());
    meta.tensors[c.key] = {DType::kUInt8,
                           {n},
                           {{Box{{0}, {n}}, 0, static_cast<uint64_t>(n),
                             digest.checksum, 0, digest.content}}};
    meta.flat_mapping[c.key] = {c.key};
  }
  meta.info.num_tensors = static_cast<int64_t>(meta.tensors.size());
  auto file = (*writer)->Finish();
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  ASSERT_TRUE((*store)->Commit(meta, {*file}).ok());
  EXPECT_EQ(FilesWith(ValueDirOf(dir.path(), id), ".val"),
            (std::pair<int, uint64_t>{1, value_bytes}));
  for (const Case& c : cases) {
    if (c.unchanged) continue;
    auto read = (*store)->ReadChunk(id, c.key, meta.tensors[c.key].chunks[0]);
    ASSERT_TRUE(read.ok()) << c.key << ": " << read.status().ToString();
    EXPECT_TRUE(read->bytes() == c.bytes) << c.key;
  }
  EXPECT_TRUE((*store)->Check()->stray_value_files.empty());

  // Nothing changed: no table file, no value file.
  const int64_t next = *(*store)->NextCheckpointId();
  auto none = (*store)->NewStagedFile(next, 0, 0);
  ASSERT_TRUE(none.ok());
  for (const Case& c : cases) {
    const ContentHash same = ChunkContentHash(c.bytes.data(), c.bytes.size());
    auto added = (*none)->AddUnlessUnchanged(
        c.key, {0}, c.bytes,
        [&](const ContentHash& hash) { return hash == same; });
    ASSERT_TRUE(added.ok());
    EXPECT_FALSE(added->added);
  }
  EXPECT_EQ(*(*none)->Finish(), "");
  EXPECT_EQ(FilesWith(ValueDirOf(dir.path(), next), ".val").first, 0);
}

// A value file in a live checkpoint's directory that none of its table files
// points into (a writer of an earlier attempt at the id left it) is reported
// by path; the checkpoint's own files are not.
TEST(ValueFileTest, StrayValueFilesOfALiveCheckpointAreReported) {
  TempDir dir;
  const CheckpointMetadata meta =
      SavedIn(dir.path(), Pattern(256 << 10, 14), 2);
  auto store = Store::Open(dir.path(), {.read_only = true});
  ASSERT_TRUE(store.ok());
  EXPECT_TRUE((*store)->Check()->stray_value_files.empty());
  const std::string own = ValueFileOfRank(dir.path(), meta.info.id, 1);
  const std::string stray =
      ValueDirOf(dir.path(), meta.info.id) + "/1-0-00000bad.val";
  fs::copy_file(own, stray);
  EXPECT_EQ((*store)->Check()->stray_value_files,
            std::vector<std::string>{stray});
}

// A value file that is missing, cut short or damaged makes every read of its
// chunks Corruption naming the chunk and the file; the other writer's chunks
// still read.
TEST(ValueFileTest, AMissingCutOrDamagedValueFileIsCorruptionNamingIt) {
  for (const std::string how : {"remove", "truncate", "flip"}) {
    TempDir dir;
    const CheckpointMetadata meta = SavedIn(dir.path(), Pattern(1 << 20, 2), 2);
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
    t.chunks.push_back(
        {Box{{0}, {t.global_shape[0]}}, 0, payload.size(), *sum});
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
  const CheckpointMetadata meta = SavedIn(dir.path(), payload, 2);
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
                                        into.data() + chunk.box.origin[0])
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
      auto store = Store::Open(dir.path(), {.file_system_hooks = faults});
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
