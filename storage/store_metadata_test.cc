// A store's metadata records: the main record, a record for each tensor of
// many chunks and one for the chunks of all the others; loads that decode only
// their tensors, damaged or missing tensor records, deletion, and stores of
// formats 1 and 3.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <map>
#include <set>

#include "storage/keys.h"
#include "storage/metadata_codec.h"
#include "storage/store.h"
#include "storage/store_testing.h"
#include "tests/testing/format_v1.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::storage {
namespace {

using ckptdb::testing::TempDir;

// Tensors "a" (100 bytes), "b" (37), "e" (empty) and "s" (0-d), each split
// over `ranks` writers (the 0-d one by the last), each writer's part of "b" in
// kMaxSmallTensorChunks + 1 chunks (so that "b" has a record of its own),
// committed as one checkpoint.
Result<CheckpointMetadata> CommitSample(Store& store, int ranks) {
  CKPTDB_ASSIGN_OR_RETURN(int64_t id, store.NextCheckpointId());
  CheckpointMetadata meta;
  meta.info.id = id;
  meta.info.world_size = ranks;
  const std::map<std::string, std::string> data = {
      {"a", std::string(100, 'a')}, {"b", std::string(37, 'b')}, {"e", ""}};
  for (const auto& [key, bytes] : data) {
    meta.tensors[key] = {DType::kUInt8, {static_cast<int64_t>(bytes.size())}};
    meta.flat_mapping[key] = {"model", key};
    meta.info.nbytes += static_cast<int64_t>(bytes.size());
  }
  meta.tensors["s"] = {DType::kUInt8, {}, {}};
  meta.flat_mapping["s"] = {"s"};
  meta.info.nbytes += 1;
  meta.info.num_tensors = 4;
  meta.values["lr"] = Value(0.5);
  meta.flat_mapping["lr"] = {"lr"};
  std::vector<std::string> files;
  for (int r = 0; r < ranks; ++r) {
    CKPTDB_ASSIGN_OR_RETURN(auto writer, store.NewStagedFile(id, r, 0));
    for (const auto& [key, bytes] : data) {
      const int64_t size = static_cast<int64_t>(bytes.size());
      const int64_t pieces =
          key == "b" ? static_cast<int64_t>(kMaxSmallTensorChunks) + 1 : 1;
      for (int64_t p = 0; p < pieces; ++p) {
        const int64_t begin = size * (r * pieces + p) / (ranks * pieces);
        const int64_t end = size * (r * pieces + p + 1) / (ranks * pieces);
        if (begin == end) continue;
        CKPTDB_ASSIGN_OR_RETURN(
            uint64_t sum,
            writer->Add(key, {begin}, bytes.substr(begin, end - begin)));
        meta.tensors[key].chunks.push_back({Box{{begin}, {end - begin}}, r,
                                            static_cast<uint64_t>(end - begin),
                                            sum});
      }
    }
    if (r + 1 == ranks) {
      CKPTDB_ASSIGN_OR_RETURN(uint64_t sum, writer->Add("s", {}, "s"));
      meta.tensors["s"].chunks.push_back({Box{{}, {}}, r, 1, sum});
    }
    CKPTDB_ASSIGN_OR_RETURN(std::string file, writer->Finish());
    if (!file.empty()) files.push_back(file);
  }
  CKPTDB_RETURN_IF_ERROR(store.Commit(meta, files));
  return meta;
}

std::unique_ptr<Store> OpenStore(const std::string& path,
                                 bool read_only = false) {
  StoreOptions options;
  options.read_only = read_only;
  auto store = Store::Open(path, options);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return store.ok() ? std::move(*store) : nullptr;
}

// The keys and values of the `meta` column family, read with RocksDB itself.
std::vector<std::pair<std::string, std::string>> MetaEntries(
    const std::string& path) {
  rocksdb::DB* raw = nullptr;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, {}}, {"chunks", {}}, {"meta", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  EXPECT_TRUE(rocksdb::DB::OpenForReadOnly({}, path, cfs, &handles, &raw).ok());
  std::vector<std::pair<std::string, std::string>> entries;
  std::unique_ptr<rocksdb::Iterator> it(
      raw->NewIterator(rocksdb::ReadOptions(), handles[2]));
  for (it->SeekToFirst(); it->Valid(); it->Next())
    entries.emplace_back(it->key().ToString(), it->value().ToString());
  it.reset();
  for (auto* h : handles) (void)raw->DestroyColumnFamilyHandle(h);
  delete raw;
  return entries;
}

std::vector<std::string> MetaKeys(const std::string& path) {
  std::vector<std::string> keys;
  for (auto& [key, value] : MetaEntries(path)) keys.push_back(std::move(key));
  return keys;
}

// Changes the `meta` column family of a closed store, in one write and one
// flushed table file: `value` at each `key`, or the key removed where
// `value` is empty.
void ChangeMetaRecords(
    const std::string& path,
    const std::vector<std::pair<std::string, std::string>>& changes) {
  rocksdb::DB* raw = nullptr;
  rocksdb::ColumnFamilyOptions chunks;
  chunks.disable_auto_compactions = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = {
      {rocksdb::kDefaultColumnFamilyName, {}},
      {"chunks", chunks},
      {"meta", {}}};
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  ASSERT_TRUE(rocksdb::DB::Open({}, path, cfs, &handles, &raw).ok());
  rocksdb::WriteBatch batch;
  for (const auto& [key, value] : changes) {
    ASSERT_TRUE((value.empty() ? batch.Delete(handles[2], key)
                               : batch.Put(handles[2], key, value))
                    .ok());
  }
  rocksdb::WriteOptions write;
  write.disableWAL = true;
  ASSERT_TRUE(raw->Write(write, &batch).ok());
  ASSERT_TRUE(raw->Flush({}, handles[2]).ok());
  for (auto* h : handles) (void)raw->DestroyColumnFamilyHandle(h);
  delete raw;
}

void ChangeMetaRecord(const std::string& path, const std::string& key,
                      const std::string& value) {
  ChangeMetaRecords(path, {{key, value}});
}

void ExpectChunksEqual(const TensorMetadata& got, const TensorMetadata& want,
                       const std::string& key) {
  ASSERT_EQ(got.chunks.size(), want.chunks.size()) << key;
  for (size_t i = 0; i < got.chunks.size(); ++i) {
    EXPECT_EQ(got.chunks[i].box.origin, want.chunks[i].box.origin) << key;
    EXPECT_EQ(got.chunks[i].box.shape, want.chunks[i].box.shape) << key;
    EXPECT_EQ(got.chunks[i].writer_rank, want.chunks[i].writer_rank) << key;
    EXPECT_EQ(got.chunks[i].nbytes, want.chunks[i].nbytes) << key;
    EXPECT_EQ(got.chunks[i].checksum, want.chunks[i].checksum) << key;
  }
}

// Whole and partial reads of every checkpoint of `store` against `saved`.
void ExpectMetadata(Store& store,
                    const std::vector<CheckpointMetadata>& saved) {
  auto list = store.List();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    const CheckpointMetadata& want = saved[i];
    EXPECT_EQ((*list)[i].id, want.info.id);
    EXPECT_EQ((*list)[i].num_tensors, 4);
    auto whole = store.GetMetadata(want.info.id);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_EQ(whole->values, want.values);
    EXPECT_EQ(whole->flat_mapping, want.flat_mapping);
    for (const auto& [key, t] : want.tensors)
      ExpectChunksEqual(whole->tensors.at(key), t, key);
    auto part = store.GetMetadata(want.info.id, {"b", "s", "nope", "lr"});
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    ASSERT_EQ(part->tensors.size(), 4u);
    EXPECT_TRUE(part->tensors.at("a").chunks.empty());
    EXPECT_EQ(part->tensors.at("a").global_shape, (Shape{100}));
    EXPECT_EQ(part->tensors.at("a").dtype, DType::kUInt8);
    EXPECT_TRUE(part->tensors.at("e").chunks.empty());
    ExpectChunksEqual(part->tensors.at("b"), want.tensors.at("b"), "b");
    ExpectChunksEqual(part->tensors.at("s"), want.tensors.at("s"), "s");
    EXPECT_EQ(part->values, want.values);
    // One tensor at a time, twice (the second from the record decoded by
    // the first): the tensor alone, a value alone, nothing for no key.
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& [key, t] : want.tensors) {
        auto one = store.GetTensorMetadata(want.info.id, key);
        ASSERT_TRUE(one.ok()) << key << ": " << one.status().ToString();
        EXPECT_EQ(one->info.id, want.info.id);
        ASSERT_EQ(one->tensors.size(), 1u) << key;
        EXPECT_EQ(one->tensors.at(key).global_shape, t.global_shape) << key;
        ExpectChunksEqual(one->tensors.at(key), t, key);
        EXPECT_TRUE(one->values.empty()) << key;
      }
      auto value = store.GetTensorMetadata(want.info.id, "lr");
      ASSERT_TRUE(value.ok()) << value.status().ToString();
      EXPECT_TRUE(value->tensors.empty());
      EXPECT_EQ(value->values, want.values);
      auto none = store.GetTensorMetadata(want.info.id, "nope");
      ASSERT_TRUE(none.ok()) << none.status().ToString();
      EXPECT_TRUE(none->tensors.empty() && none->values.empty());
    }
    for (const ChunkMetadata& c : whole->tensors.at("a").chunks) {
      auto bytes = store.ReadChunk(want.info.id, "a", c);
      ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
      EXPECT_EQ(bytes->bytes(), std::string(c.nbytes, 'a'));
    }
  }
}

TEST(StoreMetadataTest, TensorsOfManyChunksHaveRecordsAndLoadsReadOnlyTheirs) {
  TempDir dir;
  std::vector<CheckpointMetadata> saved;
  {
    auto store = OpenStore(dir.path());
    for (int ranks : {3, 1}) {
      auto meta = CommitSample(*store, ranks);
      ASSERT_TRUE(meta.ok()) << meta.status().ToString();
      saved.push_back(*meta);
    }
    ExpectMetadata(*store, saved);
    auto next = store->NextCheckpointId();
    ASSERT_TRUE(next.ok());
    EXPECT_EQ(*next, 3);
    auto report = store->Check();
    ASSERT_TRUE(report.ok());
    EXPECT_TRUE(report->unaccounted_chunk_ids.empty());
  }
  const std::vector<std::string> keys = MetaKeys(dir.path());
  // Only "b" has a record; the others' chunks are in the small tensors'.
  const std::vector<std::string> want_prefix = {
      MetaKey(1), TensorRecordKey(1, "b"), SmallTensorsKey(1),
      MetaKey(2), TensorRecordKey(2, "b"), SmallTensorsKey(2)};
  ASSERT_GE(keys.size(), want_prefix.size());
  EXPECT_EQ(std::vector<std::string>(keys.begin(), keys.begin() + 6),
            want_prefix);
  // Read-only handles see the same.
  auto reader = OpenStore(dir.path(), /*read_only=*/true);
  ExpectMetadata(*reader, saved);
}

TEST(StoreMetadataTest, DeleteAndRecoveryRemoveTheTensorRecords) {
  TempDir dir;
  {
    auto store = OpenStore(dir.path());
    ASSERT_TRUE(CommitSample(*store, 2).ok());
    auto second = CommitSample(*store, 2);
    ASSERT_TRUE(second.ok());
    // Decoded for a read, then deleted: gone for reads too.
    ASSERT_TRUE(store->GetTensorMetadata(1, "a").ok());
    ASSERT_TRUE(store->Delete(1).ok());
    EXPECT_TRUE(store->GetTensorMetadata(1, "a").status().IsNotFound());
    auto list = store->List();
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 1u);
    EXPECT_EQ((*list)[0].id, 2);
  }
  for (const std::string& key : MetaKeys(dir.path())) {
    int64_t id = 0;
    std::string_view tensor;
    if (DecodeMetaKey(key, &id) || DecodeTensorRecordKey(key, &id, &tensor) ||
        DecodeSmallTensorsKey(key, &id)) {
      EXPECT_EQ(id, 2) << "a record of the deleted checkpoint is left";
    }
  }
}

// A delete compacts its checkpoint's records away, tombstones included: no
// metadata table file keeps the deleted range for listings to step over.
TEST(StoreMetadataTest, ADeleteLeavesNoTableFileOfItsRecords) {
  TempDir dir;
  {
    auto store = OpenStore(dir.path());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(CommitSample(*store, 2).ok());
    ASSERT_TRUE(store->Delete(1).ok());
  }
  int meta_files = 0;
  for (const auto& f : testing::TableFiles(dir.path(), "meta")) {
    ++meta_files;
    EXPECT_GE(f.smallestkey, MetaRangeEnd(1)) << f.name;
  }
  EXPECT_GT(meta_files, 0);
}

// A store of CommitSample(*, 2) whose record at `key` is missing, then
// garbage: the checkpoint is still listed (its main record, the commit point,
// is whole); reading it whole, or the tensor `needing`, is Corruption naming
// the checkpoint and `names`; reading only the tensor `unaffected` works.
void ExpectADamagedRecordFailsItsReaders(const std::string& key,
                                         const std::string& needing,
                                         const std::string& names,
                                         const std::string& unaffected) {
  TempDir dir;
  {
    auto store = OpenStore(dir.path());
    ASSERT_TRUE(CommitSample(*store, 2).ok());
  }
  for (const std::string damage : {"missing", "garbage"}) {
    TempDir copy;
    std::filesystem::copy(dir.path(), copy.Sub("s"),
                          std::filesystem::copy_options::recursive);
    ChangeMetaRecord(copy.Sub("s"), key,
                     damage == "missing" ? "" : std::string(64, '\x07'));
    auto store = OpenStore(copy.Sub("s"));
    ASSERT_NE(store, nullptr);
    auto list = store->List();
    ASSERT_TRUE(list.ok());
    EXPECT_EQ(list->size(), 1u);
    for (auto meta : {store->GetMetadata(1), store->GetMetadata(1, {needing}),
                      store->GetTensorMetadata(1, needing)}) {
      ASSERT_FALSE(meta.ok()) << damage;
      EXPECT_TRUE(meta.status().IsCorruption()) << meta.status().ToString();
      EXPECT_NE(meta.status().message().find("checkpoint id 1"),
                std::string::npos)
          << meta.status().ToString();
      EXPECT_NE(meta.status().message().find(names), std::string::npos)
          << meta.status().ToString();
    }
    auto other = store->GetMetadata(1, {unaffected});
    ASSERT_TRUE(other.ok()) << damage << ": " << other.status().ToString();
    EXPECT_FALSE(other->tensors.at(unaffected).chunks.empty());
    auto alone = store->GetTensorMetadata(1, unaffected);
    ASSERT_TRUE(alone.ok()) << damage << ": " << alone.status().ToString();
    EXPECT_FALSE(alone->tensors.at(unaffected).chunks.empty());
  }
}

TEST(StoreMetadataTest, MissingOrDamagedTensorRecordIsCorruptionNamingIt) {
  ExpectADamagedRecordFailsItsReaders(TensorRecordKey(1, "b"), "b",
                                      "tensor 'b'", "a");
}

TEST(StoreMetadataTest, MissingOrDamagedSmallTensorsRecordIsCorruption) {
  ExpectADamagedRecordFailsItsReaders(SmallTensorsKey(1), "a",
                                      "small tensors' record", "b");
}

// A load asking for a few tensors reads their records one by one; one asking
// for a quarter or more walks the checkpoint's records once. Both give the
// asked tensors their chunks, the others none, and name a missing record.
// Tensors t10..t21 of 5 + t bytes; the even ones in kMaxSmallTensorChunks + 1
// chunks (a record each), the odd ones in one (in the small tensors' record).
TEST(StoreMetadataTest, FewAndManyTensorsReadTheSameRecords) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  auto id = store->NextCheckpointId();
  ASSERT_TRUE(id.ok());
  CheckpointMetadata meta;
  meta.info.id = *id;
  meta.info.world_size = 1;
  auto writer = store->NewStagedFile(*id, 0, 0);
  ASSERT_TRUE(writer.ok());
  for (int t = 0; t < 12; ++t) {
    const std::string key = "t" + std::to_string(10 + t);
    const int64_t size = 5 + t;
    const std::string bytes(size, static_cast<char>('a' + t));
    meta.tensors[key] = {DType::kUInt8, {size}};
    meta.flat_mapping[key] = {key};
    const int64_t pieces =
        t % 2 == 0 ? static_cast<int64_t>(kMaxSmallTensorChunks) + 1 : 1;
    for (int64_t p = 0; p < pieces; ++p) {
      const int64_t begin = size * p / pieces, end = size * (p + 1) / pieces;
      auto sum = (*writer)->Add(key, {begin}, bytes.substr(begin, end - begin));
      ASSERT_TRUE(sum.ok());
      meta.tensors[key].chunks.push_back({Box{{begin}, {end - begin}}, 0,
                                          static_cast<uint64_t>(end - begin),
                                          *sum});
    }
    meta.info.nbytes += size;
  }
  meta.info.num_tensors = 12;
  auto file = (*writer)->Finish();
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(store->Commit(meta, {*file}).ok());
  // Keys in any order, some twice.
  const std::vector<std::string_view> few = {"t12", "t13", "t12"};
  const std::vector<std::string_view> many = {"t20", "t10", "t13", "t14",
                                              "t17", "t10", "nope"};
  for (const auto* keys : {&few, &many}) {
    auto part = store->GetMetadata(*id, *keys);
    ASSERT_TRUE(part.ok()) << part.status().ToString();
    ASSERT_EQ(part->tensors.size(), 12u);
    for (const auto& [key, t] : meta.tensors) {
      const bool asked =
          std::find(keys->begin(), keys->end(), key) != keys->end();
      if (asked) {
        ExpectChunksEqual(part->tensors.at(key), t, key);
      } else {
        EXPECT_TRUE(part->tensors.at(key).chunks.empty()) << key;
      }
    }
  }
  // The last asked record missing, then also one in the middle: the first
  // missing one is named.
  for (const std::string missing : {"t20", "t14"}) {
    store.reset();
    ChangeMetaRecord(dir.path(), TensorRecordKey(*id, missing), "");
    store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    for (const auto* keys : {&few, &many}) {
      auto part = store->GetMetadata(*id, *keys);
      if (keys == &few) {
        EXPECT_TRUE(part.ok()) << part.status().ToString();
        continue;
      }
      ASSERT_FALSE(part.ok()) << missing;
      EXPECT_TRUE(part.status().IsCorruption()) << part.status().ToString();
      EXPECT_NE(part.status().message().find("tensor '" + missing + "'"),
                std::string::npos)
          << part.status().ToString();
    }
  }
}

// Two checkpoints (2 and 3 writers) committed into a new store at `path`.
std::vector<CheckpointMetadata> TwoCheckpoints(const std::string& path) {
  std::vector<CheckpointMetadata> saved;
  auto store = OpenStore(path);
  for (int ranks : {2, 3}) {
    auto meta = CommitSample(*store, ranks);
    EXPECT_TRUE(meta.ok()) << meta.status().ToString();
    if (meta.ok()) saved.push_back(*meta);
  }
  return saved;
}

// A store of older records (`saved`) reads as written, takes a new
// checkpoint in today's format beside them, and deletes the oldest.
void ExpectAnOlderStoreWorks(const std::string& path,
                             std::vector<CheckpointMetadata> saved) {
  auto store = OpenStore(path);
  ASSERT_NE(store, nullptr);
  ExpectMetadata(*store, saved);
  auto third = CommitSample(*store, 1);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  saved.push_back(*third);
  ExpectMetadata(*store, saved);
  ASSERT_TRUE(store->Delete(1).ok());
  saved.erase(saved.begin());
  ExpectMetadata(*store, saved);
}

TEST(StoreMetadataTest, StoresOfFormat1StillOpenAndRead) {
  TempDir dir;
  const std::vector<CheckpointMetadata> saved = TwoCheckpoints(dir.path());
  ASSERT_TRUE(ckptdb::testing::RewriteAsFormat1(dir.path()).ok());
  // + the store marker, the recorded IDENTITY and the options files' sums
  EXPECT_EQ(MetaKeys(dir.path()).size(), 2u + 3u);
  ExpectAnOlderStoreWorks(dir.path(), saved);
}

// Stores written before format 4 have a record for every tensor: they open,
// list, read whole and in part, take new checkpoints beside the old ones, and
// delete them (with their records).
TEST(StoreMetadataTest, StoresOfFormat3StillOpenAndRead) {
  TempDir dir;
  const std::vector<CheckpointMetadata> saved = TwoCheckpoints(dir.path());
  ASSERT_TRUE(ckptdb::testing::RewriteInFormat(dir.path(), 3).ok());
  const std::vector<std::string> keys = MetaKeys(dir.path());
  for (int64_t id : {1, 2}) {
    for (const char* tensor : {"a", "b", "e", "s"}) {
      EXPECT_TRUE(std::find(keys.begin(), keys.end(),
                            TensorRecordKey(id, tensor)) != keys.end())
          << id << " " << tensor;
    }
  }
  ExpectAnOlderStoreWorks(dir.path(), saved);
  for (const std::string& key : MetaKeys(dir.path())) {
    int64_t id = 0;
    std::string_view tensor;
    if (DecodeTensorRecordKey(key, &id, &tensor)) {
      EXPECT_NE(id, 1) << key;
    }
  }
}

// Each commit's records go into a table file of their own, which holds no
// other checkpoint's keys (RocksDB moves level-0 files that overlap nothing
// down whole: no compaction filter or per-level compression on `meta`).
TEST(StoreMetadataTest,
     EachCommitsTableFileHoldsItsCheckpointAloneAndOutlivesOthers) {
  TempDir dir;
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  // More commits than level 0 holds before the store compacts it.
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(CommitSample(*store, 2).ok());
  // The checkpoint whose records a file holds; 0 for the store's header
  // keys, -1 for a file that spans several checkpoints.
  auto owner = [](const rocksdb::LiveFileMetaData& f) {
    for (int64_t id = 1; id <= 6; ++id) {
      if (f.smallestkey >= MetaKey(id) && f.largestkey < MetaRangeEnd(id))
        return id;
    }
    return f.smallestkey >= std::string(kNextIdKey) ? int64_t{0} : int64_t{-1};
  };
  auto files = [&]() {
    std::map<std::string, int64_t> out;  // file name -> owner
    for (const auto& f : testing::TableFiles(dir.path(), "meta"))
      out[f.name] = owner(f);
    return out;
  };
  const auto before = files();
  std::set<int64_t> owners;
  for (const auto& [name, id] : before) {
    EXPECT_GE(id, 0) << name << " holds keys of several checkpoints";
    owners.insert(id);
  }
  EXPECT_EQ(owners, (std::set<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  // Deleting two checkpoints removes their files and rewrites no other.
  ASSERT_TRUE(store->Delete(2).ok());
  ASSERT_TRUE(store->Delete(4).ok());
  std::map<std::string, int64_t> kept = before;
  std::erase_if(kept,
                [](const auto& f) { return f.second == 2 || f.second == 4; });
  EXPECT_EQ(files(), kept);
  EXPECT_EQ(store->List()->size(), 4u);
}

// A store whose commits wrote the next id beside their records (as commits
// did before the journal's high-water mark alone carried it) has table files
// that overlap: deletes, commits and a reopen work on it, ids keep rising.
TEST(StoreMetadataTest, AStoreWhoseCommitsWroteTheNextIdKeepsWorking) {
  TempDir dir;
  std::vector<CheckpointMetadata> saved = TwoCheckpoints(dir.path());
  // The latest commit's main record again, with the next id, in one file
  // that spans both and overlaps the record's own file.
  std::string record;
  for (const auto& [key, value] : MetaEntries(dir.path())) {
    if (key == MetaKey(2)) record = value;
  }
  ASSERT_FALSE(record.empty());
  std::string next;
  PutBigEndian64(&next, 3);
  ChangeMetaRecords(dir.path(),
                    {{MetaKey(2), record}, {std::string(kNextIdKey), next}});
  {
    auto store = OpenStore(dir.path());
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Delete(2).ok());
    saved.pop_back();
    auto third = CommitSample(*store, 2);
    ASSERT_TRUE(third.ok()) << third.status().ToString();
    EXPECT_EQ(third->info.id, 3);
    saved.push_back(*third);
    ASSERT_TRUE(store->Delete(1).ok());
    saved.erase(saved.begin());
  }
  auto store = OpenStore(dir.path());
  ASSERT_NE(store, nullptr);
  auto fourth = CommitSample(*store, 1);
  ASSERT_TRUE(fourth.ok()) << fourth.status().ToString();
  EXPECT_EQ(fourth->info.id, 4);
  saved.push_back(*fourth);
  ExpectMetadata(*store, saved);
}

}  // namespace
}  // namespace ckptdb::storage
