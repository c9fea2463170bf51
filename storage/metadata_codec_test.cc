#include "storage/metadata_codec.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>

#include "core/random_boxes.h"
#include "storage/box_stream.h"
#include "storage/checkpoint.capnp.h"
#include "storage/keys.h"

namespace ckptdb::storage {
namespace {

using Records = std::vector<std::pair<std::string, std::string>>;

CheckpointMetadata Sample() {
  CheckpointMetadata meta;
  meta.info.id = 3;
  meta.info.step = 100;
  meta.info.tag = "best";
  meta.info.created = 1700000000.5;
  meta.info.world_size = 2;
  TensorMetadata w{DType::kBFloat16, {4, 2}, {}};
  w.chunks.push_back({Box{{2, 0}, {2, 2}}, 1, 8, 0xabc});
  w.chunks.push_back({Box{{0, 0}, {2, 2}}, 0, 8, 0xdef});
  meta.tensors["model.w"] = w;
  meta.tensors["s"] = TensorMetadata{DType::kFloat64, {}, {{Box{}, 0, 8, 1}}};
  meta.tensors["e"] = TensorMetadata{DType::kInt8, {0, 3}, {}};
  meta.info.nbytes = 24;
  meta.info.num_tensors = 3;
  meta.flat_mapping = {{"model.w", {"model", "w"}},
                       {"s", {"s"}},
                       {"e", {"e"}},
                       {"lr", {"opt", "lr"}},
                       {"name", {"name"}},
                       {"blob", {"blob"}},
                       {"on", {"on"}},
                       {"n", {"n"}},
                       {"rng", {"rng"}}};
  meta.values = {
      {"lr", Value(0.125)},
      {"name", Value(std::string("gpt"))},
      {"blob", Value(Bytes{std::string("\0\1\2", 3)})},
      {"on", Value(true)},
      {"n", Value(int64_t{-5})},
      {"rng", Value(BigInt{"-340282366920938463463374607431768211456"})}};
  meta.user_metadata = {{"git", "abc123"}};
  return meta;
}

// Every layout of the records: today's (tensors of few chunks in the main
// record), format 3's (a record per tensor), format 1's (one record).
std::vector<Records> BothFormats(const CheckpointMetadata& meta) {
  return {EncodeCheckpointRecords(meta),
          EncodeCheckpointRecordsOfFormat(meta, 3),
          {{MetaKey(meta.info.id), EncodeCheckpointV1(meta)}}};
}

// Sample() with a tensor of more chunks than the main record keeps: rows of
// [kMaxSmallTensorChunks + 1, 2], one chunk each.
CheckpointMetadata WithManyChunks() {
  CheckpointMetadata meta = Sample();
  const int64_t rows = static_cast<int64_t>(kMaxSmallTensorChunks) + 1;
  TensorMetadata big{DType::kFloat32, {rows, 2}, {}};
  for (int64_t r = rows - 1; r >= 0; --r)
    big.chunks.push_back({Box{{r, 0}, {1, 2}}, 1, 8, uint64_t(100 + r)});
  meta.tensors["big"] = big;
  meta.flat_mapping["big"] = {"big"};
  meta.info.nbytes += 8 * rows;
  meta.info.num_tensors += 1;
  return meta;
}

void ExpectSameChunks(const std::vector<ChunkMetadata>& got,
                      std::vector<ChunkMetadata> want, const std::string& ctx) {
  std::sort(want.begin(), want.end(), [](const auto& a, const auto& b) {
    return a.box.origin < b.box.origin;
  });
  ASSERT_EQ(got.size(), want.size()) << ctx;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].box.origin, want[i].box.origin) << ctx << " #" << i;
    EXPECT_EQ(got[i].box.shape, want[i].box.shape) << ctx << " #" << i;
    EXPECT_EQ(got[i].writer_rank, want[i].writer_rank) << ctx << " #" << i;
    EXPECT_EQ(got[i].nbytes, want[i].nbytes) << ctx << " #" << i;
    EXPECT_EQ(got[i].checksum, want[i].checksum) << ctx << " #" << i;
  }
}

TEST(MetadataCodecTest, RoundTrip) {
  CheckpointMetadata meta = Sample();
  for (const Records& records : BothFormats(meta)) {
    auto decoded = DecodeCheckpointRecords(records);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->info.id, 3);
    EXPECT_EQ(decoded->info.step, 100);
    EXPECT_EQ(decoded->info.tag, "best");
    EXPECT_EQ(decoded->info.created, 1700000000.5);
    EXPECT_EQ(decoded->info.num_tensors, 3);
    const auto& w = decoded->tensors.at("model.w");
    EXPECT_EQ(w.dtype, DType::kBFloat16);
    ExpectSameChunks(w.chunks, meta.tensors["model.w"].chunks, "model.w");
    ExpectSameChunks(decoded->tensors.at("s").chunks, meta.tensors["s"].chunks,
                     "s");
    EXPECT_TRUE(decoded->tensors.at("e").chunks.empty());
    EXPECT_EQ(decoded->tensors.at("e").global_shape, (Shape{0, 3}));
    EXPECT_EQ(decoded->flat_mapping, meta.flat_mapping);
    EXPECT_EQ(decoded->values, meta.values);
    EXPECT_EQ(decoded->user_metadata, meta.user_metadata);
    auto info = DecodeCheckpointInfo(records[0].second);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->nbytes, 24);
    EXPECT_EQ(info->num_tensors, 3);
  }
}

TEST(MetadataCodecTest, IncrementalFieldsRoundTripAndOlderRecordsLackThem) {
  CheckpointMetadata meta = Sample();
  meta.info.nbytes_written = 8;
  meta.info.references = {1, 2};
  auto& w = meta.tensors["model.w"].chunks;
  w[0].holder_id = 2;
  w[0].content_hash = ContentHash{1, 2};
  w[1].content_hash = ContentHash{3, 4};
  meta.tensors["s"].chunks[0].content_hash = ContentHash{5, 6};
  // In the main record (today) and in tensor records (format 3).
  for (const Records& records : {EncodeCheckpointRecords(meta),
                                 EncodeCheckpointRecordsOfFormat(meta, 3)}) {
    auto decoded = DecodeCheckpointRecords(records);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->info.nbytes_written, 8);
    EXPECT_EQ(decoded->info.references, (std::vector<int64_t>{1, 2}));
    const auto& got = decoded->tensors.at("model.w").chunks;
    ASSERT_EQ(got.size(), 2u);
    // Sorted by offset: [0, 0] is w[1], [2, 0] is w[0].
    EXPECT_EQ(got[0].holder_id, 0);
    EXPECT_EQ(got[0].content_hash, (ContentHash{3, 4}));
    EXPECT_EQ(got[1].holder_id, 2);
    EXPECT_EQ(got[1].content_hash, (ContentHash{1, 2}));
    EXPECT_EQ(decoded->tensors.at("s").chunks[0].content_hash,
              (ContentHash{5, 6}));
  }

  // A record written before incremental saves (format 1 here; format 2's
  // fields are absent the same way): every byte written, no hashes.
  auto old = DecodeCheckpointRecords(
      {{MetaKey(meta.info.id), EncodeCheckpointV1(meta)}});
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->info.nbytes_written, old->info.nbytes);
  EXPECT_TRUE(old->info.references.empty());
  for (const auto& c : old->tensors.at("model.w").chunks) {
    EXPECT_EQ(c.holder_id, 0);
    EXPECT_FALSE(c.content_hash.has_value());
  }

  // A holder the references do not name, and references that do not ascend
  // below the checkpoint's own id, are Corruption.
  meta.info.references = {1};
  auto unnamed = DecodeCheckpointRecords(EncodeCheckpointRecords(meta));
  EXPECT_TRUE(unnamed.status().IsCorruption()) << unnamed.status().ToString();
  meta.info.references = {2, 3};
  auto own = DecodeCheckpointRecords(EncodeCheckpointRecords(meta));
  EXPECT_TRUE(own.status().IsCorruption()) << own.status().ToString();
}

TEST(MetadataCodecTest, PathKindsAndNoneRoundTrip) {
  CheckpointMetadata meta = Sample();
  using K = PathPartKind;
  meta.flat_mapping["opt.betas.1"] = {"opt", "betas", "1"};
  meta.values["opt.betas.1"] = Value(0.999);
  meta.flat_mapping["opt.state.0.foreach"] = {"opt", "state", "0", "foreach"};
  meta.values["opt.state.0.foreach"] = Value(None{});
  meta.path_kinds = {
      {"opt.betas.1", {K::kStrKey, K::kStrKey, K::kTupleIndex}},
      {"opt.state.0.foreach", {K::kStrKey, K::kStrKey, K::kIntKey, K::kStrKey}},
      {"model.w", {K::kStrKey, K::kListIndex}}};
  meta.flat_mapping["model.w"] = {"model", "3"};
  for (const Records& records : BothFormats(meta)) {
    auto decoded = DecodeCheckpointRecords(records);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(decoded->path_kinds, meta.path_kinds);
    EXPECT_EQ(decoded->flat_mapping, meta.flat_mapping);
    EXPECT_EQ(decoded->values, meta.values);
  }
  // A plain record (every part a str key) has no kinds.
  auto plain = DecodeCheckpointRecords(EncodeCheckpointRecords(Sample()));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->path_kinds.empty());
}

TEST(MetadataCodecTest, AMainRecordReadWithoutPathsHasEverythingElse) {
  CheckpointMetadata meta = Sample();
  meta.flat_mapping["opt.betas.1"] = {"opt", "betas", "1"};
  meta.values["opt.betas.1"] = Value(0.999);
  meta.path_kinds = {{"opt.betas.1",
                      {PathPartKind::kStrKey, PathPartKind::kStrKey,
                       PathPartKind::kTupleIndex}}};
  const Records records = EncodeCheckpointRecords(meta);
  auto whole = DecodeMainRecord(records[0].second);
  auto keyed = DecodeMainRecord(records[0].second, /*paths=*/false);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  ASSERT_TRUE(keyed.ok()) << keyed.status().ToString();
  EXPECT_EQ(whole->meta.flat_mapping, meta.flat_mapping);
  EXPECT_EQ(whole->meta.path_kinds, meta.path_kinds);
  EXPECT_TRUE(keyed->meta.flat_mapping.empty());
  EXPECT_TRUE(keyed->meta.path_kinds.empty());
  EXPECT_EQ(keyed->meta.values, meta.values);
  EXPECT_EQ(keyed->meta.info.id, meta.info.id);
  ASSERT_EQ(keyed->meta.tensors.size(), meta.tensors.size());
  for (const auto& [key, tensor] : meta.tensors) {
    const TensorMetadata& read = keyed->meta.tensors.at(key);
    EXPECT_EQ(read.dtype, tensor.dtype) << key;
    EXPECT_EQ(read.global_shape, tensor.global_shape) << key;
  }
  EXPECT_EQ(keyed->chunk_counts, whole->chunk_counts);
  EXPECT_EQ(keyed->small, whole->small);
  EXPECT_EQ(keyed->small_counts, whole->small_counts);
  // A tensor or a value without a path is damage either way.
  for (const std::string key : {"model.w", "opt.betas.1"}) {
    CheckpointMetadata pathless = meta;
    pathless.flat_mapping[key] = {};
    pathless.path_kinds.clear();
    const std::string bytes = EncodeCheckpointRecords(pathless)[0].second;
    for (bool paths : {true, false}) {
      auto decoded = DecodeMainRecord(bytes, paths);
      ASSERT_FALSE(decoded.ok()) << key << " paths " << paths;
      EXPECT_TRUE(decoded.status().IsCorruption());
      EXPECT_NE(decoded.status().message().find("empty path"),
                std::string::npos)
          << decoded.status().ToString();
    }
  }
}

TEST(MetadataCodecTest, PathKindsThatDoNotFitThePathAreCorruption) {
  using K = PathPartKind;
  // A value's path and a tensor's, each of two parts, in every layout of the
  // records.
  for (const std::string key : {"lr", "model.w"}) {
    const std::string first = Sample().flat_mapping.at(key).at(0);
    const std::vector<std::pair<PathKinds, std::string>> cases = {
        {{K::kStrKey}, "1 path kinds for 2 parts"},
        {{K::kStrKey, static_cast<K>(9)}, "path kind 9"},
        {{K::kIntKey, K::kStrKey}, "int path part '" + first + "'"}};
    for (const auto& [kinds, message] : cases) {
      CheckpointMetadata meta = Sample();
      meta.path_kinds[key] = kinds;
      for (const Records& records : BothFormats(meta)) {
        auto decoded = DecodeCheckpointRecords(records);
        ASSERT_FALSE(decoded.ok()) << key << ": " << message;
        EXPECT_TRUE(decoded.status().IsCorruption());
        EXPECT_NE(decoded.status().message().find(message), std::string::npos)
            << decoded.status().ToString();
        // A read of the main record without its paths checks the kinds too.
        auto keyed = DecodeMainRecord(records[0].second, /*paths=*/false);
        ASSERT_FALSE(keyed.ok()) << key << ": " << message;
        EXPECT_TRUE(keyed.status().IsCorruption());
        EXPECT_NE(keyed.status().message().find(message), std::string::npos)
            << keyed.status().ToString();
      }
    }
  }
}

TEST(MetadataCodecTest, SmallTensorsShareOneRecord) {
  const Records records = EncodeCheckpointRecords(WithManyChunks());
  // The main record, the record of "big" alone, the small tensors' record.
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].first, MetaKey(3));
  EXPECT_EQ(records[1].first, TensorRecordKey(3, "big"));
  EXPECT_EQ(records[2].first, SmallTensorsKey(3));
  auto main = DecodeMainRecord(records[0].second);
  ASSERT_TRUE(main.ok()) << main.status().ToString();
  EXPECT_EQ(main->format_version, kFormatVersion);
  EXPECT_EQ(main->meta.tensors.size(), 4u);
  for (const auto& [key, tensor] : main->meta.tensors)
    EXPECT_TRUE(tensor.chunks.empty()) << key;
  EXPECT_EQ(main->chunk_counts, (std::map<std::string, uint64_t, std::less<>>{
                                    {"big", kMaxSmallTensorChunks + 1}}));
  // "big", "e", "model.w", "s": all but "big" small.
  EXPECT_EQ(main->small, (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(main->small_counts, (std::vector<uint64_t>{0, 2, 1}));
  auto big = DecodeTensorRecord(*main, "big", records[1].second);
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  ExpectSameChunks(*big, WithManyChunks().tensors["big"].chunks, "big");
  // Only the asked small tensors get their chunks.
  MainRecord part = *main;
  const std::vector<std::string_view> wanted = {"nope", "s"};
  ASSERT_TRUE(DecodeSmallTensors(&part, records[2].second, &wanted).ok());
  EXPECT_TRUE(part.meta.tensors.at("model.w").chunks.empty());
  ExpectSameChunks(part.meta.tensors.at("s").chunks,
                   Sample().tensors["s"].chunks, "s");
  ASSERT_TRUE(DecodeSmallTensors(&*main, records[2].second, nullptr).ok());
  ExpectSameChunks(main->meta.tensors.at("model.w").chunks,
                   Sample().tensors["model.w"].chunks, "model.w");
  auto decoded = DecodeCheckpointRecords(records);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  for (const auto& [key, tensor] : WithManyChunks().tensors)
    ExpectSameChunks(decoded->tensors.at(key).chunks, tensor.chunks, key);
}

TEST(MetadataCodecTest, SmallTensorsRecordMustMatchItsMainRecord) {
  const Records records = EncodeCheckpointRecords(WithManyChunks());
  auto expect = [](const Records& bad, const std::string& needle) {
    auto decoded = DecodeCheckpointRecords(bad);
    ASSERT_FALSE(decoded.ok()) << needle;
    EXPECT_TRUE(decoded.status().IsCorruption());
    EXPECT_NE(decoded.status().message().find(needle), std::string::npos)
        << decoded.status().ToString();
  };
  // Missing.
  expect(Records(records.begin(), records.end() - 1),
         "the small tensors' record is missing: the chunks of 3 tensors");
  // Another checkpoint's.
  CheckpointMetadata other = WithManyChunks();
  other.info.id = 4;
  Records foreign = records;
  foreign[2].second = EncodeCheckpointRecords(other)[2].second;
  expect(foreign, "belongs to checkpoint 4");
  // Another checkpoint's, of fewer small tensors.
  Records fewer = records;
  CheckpointMetadata one_small = WithManyChunks();
  one_small.tensors.erase("e");
  one_small.tensors.erase("s");
  one_small.info.nbytes -= 8;
  fewer[2].second = EncodeCheckpointRecords(one_small)[2].second;
  expect(fewer, "holds 1 tensors; the main record has 3");
  // A damaged entry names its tensor.
  CheckpointMetadata bad_box = WithManyChunks();
  bad_box.tensors["model.w"].chunks[0].box.origin = {3, 0};
  Records damaged = records;
  damaged[2].second = EncodeCheckpointRecords(bad_box)[2].second;
  expect(damaged, "tensor 'model.w'");
  // A record of a small tensor of its own.
  Records extra = records;
  extra.insert(extra.begin() + 2,
               EncodeCheckpointRecordsOfFormat(Sample(), 3)[2]);
  expect(extra, "'model.w', whose chunks the checkpoint keeps with its small");
  auto main = DecodeMainRecord(records[0].second);
  ASSERT_TRUE(main.ok());
  auto alone = DecodeTensorRecord(*main, "model.w", extra[2].second);
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.status().message().find("keeps with its small tensors"),
            std::string::npos)
      << alone.status().ToString();
  // A small tensors' record for a checkpoint with none, and one left over.
  Records none = EncodeCheckpointRecordsOfFormat(Sample(), 3);
  none.push_back(records[2]);
  none.back().first = SmallTensorsKey(3);
  expect(none, "a small tensors' record for a checkpoint with none");
  Records trailing = records;
  trailing.push_back({TensorRecordKey(3, "zz"), records[1].second});
  expect(trailing, "record 3 is not a record of checkpoint 3");
}

TEST(MetadataCodecTest, MainRecordOfFormat3HasNoChunks) {
  const Records records = EncodeCheckpointRecordsOfFormat(Sample(), 3);
  ASSERT_EQ(records.size(), 4u);  // main + one per tensor, in key order
  EXPECT_EQ(records[0].first, MetaKey(3));
  EXPECT_EQ(records[1].first, TensorRecordKey(3, "e"));
  EXPECT_EQ(records[2].first, TensorRecordKey(3, "model.w"));
  EXPECT_EQ(records[3].first, TensorRecordKey(3, "s"));
  auto main = DecodeMainRecord(records[0].second);
  ASSERT_TRUE(main.ok()) << main.status().ToString();
  EXPECT_EQ(main->format_version, 3u);
  EXPECT_FALSE(main->has_chunks());
  EXPECT_EQ(main->meta.tensors.size(), 3u);
  for (const auto& [key, tensor] : main->meta.tensors)
    EXPECT_TRUE(tensor.chunks.empty()) << key;
  EXPECT_EQ(main->chunk_counts.at("model.w"), 2u);
  EXPECT_EQ(main->meta.tensors.at("model.w").global_shape, (Shape{4, 2}));
  // One tensor alone.
  auto w = DecodeTensorRecord(*main, "model.w", records[2].second);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ExpectSameChunks(*w, Sample().tensors["model.w"].chunks, "model.w");
}

// Every encoding of `meta` that can express the defect must be rejected.
void ExpectCorruption(const CheckpointMetadata& meta, const std::string& needle,
                      bool v2_too = true) {
  const auto formats = BothFormats(meta);
  for (size_t index = v2_too ? 0 : 2; index < formats.size(); ++index) {
    auto decoded = DecodeCheckpointRecords(formats[index]);
    ASSERT_FALSE(decoded.ok()) << "layout " << index;
    EXPECT_TRUE(decoded.status().IsCorruption());
    EXPECT_NE(decoded.status().message().find(needle), std::string::npos)
        << decoded.status().ToString();
  }
}

TEST(MetadataCodecTest, RejectsInconsistentRecords) {
  CheckpointMetadata meta = Sample();
  meta.tensors["model.w"].chunks[0].box.origin = {3, 0};
  ExpectCorruption(meta, "outside its shape");
  meta = Sample();
  meta.tensors["model.w"].chunks[0].nbytes = 9;  // format 2 stores no sizes
  ExpectCorruption(meta, "records 9 bytes for 4 elements", false);
  meta = Sample();
  meta.tensors["model.w"].chunks.pop_back();
  ExpectCorruption(meta, "chunks hold 4 of 8 elements");
  meta = Sample();
  meta.tensors["model.w"].chunks[0].writer_rank = 5;
  ExpectCorruption(meta, "writer rank 5");
  meta = Sample();
  meta.tensors["model.w"].global_shape = {4, -2};
  ExpectCorruption(meta, "tensor 'model.w' shape has extent -2");
  meta = Sample();
  meta.info.nbytes = 1;
  ExpectCorruption(meta, "the record says 1");
  meta = Sample();
  meta.tensors["model.w"].chunks[0].box.shape = {2, 3};
  meta.tensors["model.w"].chunks[0].nbytes = 12;
  ExpectCorruption(meta, "outside its shape");
  // An integer beyond 64 bits in any form but its one decimal spelling.
  for (const char* digits :
       {"12", "-9223372036854775808", "9223372036854775807", "0",
        "09223372036854775808", "-0", "", "-", "1e40", "+9223372036854775808",
        "92233720368547758080x"}) {
    meta = Sample();
    meta.values["rng"] = Value(BigInt{digits});
    ExpectCorruption(meta, "not the decimal digits of one outside 64 bits");
  }
}

TEST(MetadataCodecTest, IntegersJustOutside64BitsAreBigInts) {
  for (const char* digits :
       {"9223372036854775808", "-9223372036854775809", "18446744073709551616",
        "-340282366920938463463374607431768211456"}) {
    EXPECT_TRUE(IsValidBigInt(BigInt{digits})) << digits;
  }
}

TEST(MetadataCodecTest, RejectsOverlapThatHidesAGapOfTheSameVolume) {
  // Rows [0, 2) and [1, 3) of [4, 2]: 8 elements held, as many as the tensor
  // has, but row 1 twice and row 3 never.
  CheckpointMetadata meta = Sample();
  meta.tensors["model.w"].chunks[0].box.origin = {1, 0};
  ExpectCorruption(meta, "tensor 'model.w'");
  ExpectCorruption(meta, "overlap");
  ExpectCorruption(meta, "[1, 0]");
  // A chunk of no element was never written: a damaged record.
  meta = Sample();
  meta.tensors["model.w"].chunks.push_back({Box{{4, 0}, {0, 2}}, 0, 0, 0});
  ExpectCorruption(meta, "empty chunk at [4, 0]");
}

TEST(MetadataCodecTest, TensorRecordsMustMatchTheirMainRecord) {
  Records records = EncodeCheckpointRecordsOfFormat(Sample(), 3);
  auto main = DecodeMainRecord(records[0].second);
  ASSERT_TRUE(main.ok());
  // Another tensor's record, or another checkpoint's.
  auto swapped = DecodeTensorRecord(*main, "s", records[2].second);
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("belongs to tensor 'model.w'"),
            std::string::npos)
      << swapped.status().ToString();
  CheckpointMetadata other = Sample();
  other.info.id = 4;
  auto foreign = DecodeTensorRecord(
      *main, "s", EncodeCheckpointRecordsOfFormat(other, 3)[3].second);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("of checkpoint 4"),
            std::string::npos);
  EXPECT_FALSE(DecodeTensorRecord(*main, "nope", records[2].second).ok());
  // A missing record, an extra one.
  Records missing = records;
  missing.erase(missing.begin() + 2);
  auto decoded = DecodeCheckpointRecords(missing);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find(
                "tensor 'model.w' has no record: its chunks are missing"),
            std::string::npos)
      << decoded.status().ToString();
  missing = records;
  missing.pop_back();
  EXPECT_FALSE(DecodeCheckpointRecords(missing).ok());
  Records extra = records;
  extra.emplace_back(TensorRecordKey(3, "z"), records[3].second);
  decoded = DecodeCheckpointRecords(extra);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("'z'"), std::string::npos);
}

// `record` (a message of type T) with its format version set to `version`.
template <typename T>
std::string WithFormatVersion(const std::string& record, uint32_t version) {
  capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(
      reinterpret_cast<const capnp::word*>(record.data()),
      record.size() / sizeof(capnp::word)));
  capnp::MallocMessageBuilder builder;
  builder.setRoot(reader.getRoot<T>());
  builder.getRoot<T>().setFormatVersion(version);
  auto words = capnp::messageToFlatArray(builder);
  return std::string(reinterpret_cast<const char*>(words.begin()),
                     words.size() * sizeof(capnp::word));
}

// Format 2 (before value files) has the records of format 3: checkpoints
// written then still decode; a tensor record of another format than its main
// record's is Corruption.
TEST(MetadataCodecTest, RecordsOfFormat2StillDecode) {
  const Records records = EncodeCheckpointRecordsOfFormat(Sample(), 3);
  auto main =
      DecodeMainRecord(WithFormatVersion<Checkpoint>(records[0].second, 2));
  ASSERT_TRUE(main.ok()) << main.status().ToString();
  EXPECT_EQ(main->format_version, 2u);
  EXPECT_FALSE(main->has_chunks());
  auto w = DecodeTensorRecord(
      *main, "model.w", WithFormatVersion<TensorChunks>(records[2].second, 2));
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ExpectSameChunks(*w, Sample().tensors["model.w"].chunks, "model.w");
  auto mixed = DecodeTensorRecord(*main, "model.w", records[2].second);
  EXPECT_TRUE(mixed.status().IsCorruption()) << mixed.status().ToString();
  EXPECT_NE(mixed.status().message().find("format version 3"),
            std::string::npos)
      << mixed.status().ToString();
}

TEST(MetadataCodecTest, UnknownFormatVersionIsCorruptionNamingIt) {
  const Records records = EncodeCheckpointRecords(Sample());
  capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(
      reinterpret_cast<const capnp::word*>(records[0].second.data()),
      records[0].second.size() / sizeof(capnp::word)));
  capnp::MallocMessageBuilder builder;
  builder.setRoot(reader.getRoot<Checkpoint>());
  builder.getRoot<Checkpoint>().setFormatVersion(kFormatVersion + 1);
  auto words = capnp::messageToFlatArray(builder);
  const std::string future(reinterpret_cast<const char*>(words.begin()),
                           words.size() * sizeof(capnp::word));
  for (auto decoded : {DecodeMainRecord(future).status(),
                       DecodeCheckpointInfo(future).status()}) {
    EXPECT_TRUE(decoded.IsCorruption());
    EXPECT_NE(decoded.message().find("format version " +
                                     std::to_string(kFormatVersion + 1) +
                                     " is not supported"),
              std::string::npos)
        << decoded.ToString();
  }
}

TEST(MetadataCodecTest, HostileBytesNeverCrash) {
  // Main records of every layout, then format 3's tensor records.
  const Records good = EncodeCheckpointRecordsOfFormat(Sample(), 3);
  auto main = DecodeMainRecord(good[0].second);
  ASSERT_TRUE(main.ok());
  std::vector<std::string> targets = {
      EncodeCheckpointV1(Sample()),
      EncodeCheckpointRecords(WithManyChunks())[0].second};
  for (const auto& [key, value] : good) targets.push_back(value);
  std::mt19937 rng(7);
  int rejected = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    const size_t which = trial % targets.size();
    std::string bad = targets[which];
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f)
      bad[rng() % bad.size()] = static_cast<char>(rng());
    if (trial % 5 == 0) bad.resize((rng() % (bad.size() / 8)) * 8);
    Status s;
    if (which <= 2) {
      s = DecodeMainRecord(bad).status();
      (void)DecodeCheckpointInfo(bad);
    } else {
      std::string_view key;
      int64_t id = 0;
      ASSERT_TRUE(DecodeTensorRecordKey(good[which - 2].first, &id, &key));
      s = DecodeTensorRecord(*main, key, bad).status();
    }
    if (!s.ok()) {
      EXPECT_TRUE(s.IsCorruption()) << s.ToString();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 200);
  EXPECT_FALSE(DecodeMainRecord("").ok());
  EXPECT_FALSE(DecodeMainRecord("12345").ok());
}

TEST(BoxStreamTest, HostileStreamsNeverCrash) {
  const Shape shape = {7, 5, 3};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 20000; ++trial) {
    std::string bytes(rng() % 24, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    std::vector<ChunkMetadata> chunks(rng() % 6);
    Status s = DecodeBoxStream(bytes, shape, 4, 1 + rng() % 300, "t", &chunks);
    EXPECT_TRUE(s.ok() || s.IsCorruption()) << s.ToString();
  }
}

// A random tensor of 0 to 4 dimensions (some empty), partitioned at random
// (kd-tree, not a grid), with writers up to `world`.
TensorMetadata RandomTensor(std::mt19937& rng, int32_t world) {
  TensorMetadata t;
  t.dtype = rng() % 2 ? DType::kBFloat16 : DType::kFloat32;
  const size_t ndim = rng() % 5;
  for (size_t d = 0; d < ndim; ++d)
    t.global_shape.push_back(rng() % 13 == 0 ? 0 : 1 + rng() % 40);
  if (NumElements(t.global_shape) == 0) return t;
  std::vector<planner::Box> boxes;
  planner::testing::RandomPartition({Shape(ndim, 0), t.global_shape}, rng,
                                    1 + rng() % 8, boxes);
  std::shuffle(boxes.begin(), boxes.end(), rng);
  for (const planner::Box& b : boxes) {
    ChunkMetadata c;
    c.box.origin = b.origin;
    c.box.shape = b.shape;
    c.writer_rank = rng() % 3 ? static_cast<int32_t>(rng() % world) : 0;
    c.nbytes = NumElements(b.shape) * DTypeSize(t.dtype);
    c.checksum = (uint64_t{rng()} << 32) | rng();
    t.chunks.push_back(c);
  }
  return t;
}

TEST(MetadataCodecTest, RandomPartitionsRoundTrip) {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    CheckpointMetadata meta;
    meta.info.id = 1 + trial;
    meta.info.world_size = trial % 2 ? 16384 : 1 + trial;
    const int tensors = static_cast<int>(rng() % 6);
    for (int i = 0; i < tensors; ++i) {
      const std::string key = "t" + std::to_string(i) + std::string(1, '\0');
      TensorMetadata t = RandomTensor(rng, meta.info.world_size);
      meta.info.nbytes += NumElements(t.global_shape) * DTypeSize(t.dtype);
      meta.tensors[key] = t;
      meta.flat_mapping[key] = {key};
    }
    meta.info.num_tensors = tensors;
    const std::string ctx = "trial " + std::to_string(trial);
    for (const Records& records : BothFormats(meta)) {
      auto decoded = DecodeCheckpointRecords(records);
      ASSERT_TRUE(decoded.ok()) << ctx << ": " << decoded.status().ToString();
      ASSERT_EQ(decoded->tensors.size(), meta.tensors.size());
      for (const auto& [key, t] : meta.tensors) {
        const TensorMetadata& got = decoded->tensors.at(key);
        EXPECT_EQ(got.global_shape, t.global_shape) << ctx;
        EXPECT_EQ(got.dtype, t.dtype) << ctx;
        ExpectSameChunks(got.chunks, t.chunks, ctx + " " + key);
      }
    }
  }
}

// A regular grid of rows x cols chunks of [8, 128] over `world` writers,
// written round-robin with a stride as a DP-replicated save assigns them.
CheckpointMetadata Grid(int64_t rows, int64_t cols, int32_t world) {
  CheckpointMetadata meta;
  meta.info.id = 1;
  meta.info.world_size = world;
  TensorMetadata t{DType::kBFloat16, {rows * 8, cols * 128 - 5}, {}};
  int32_t writer = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const Shape shape = {8,
                           std::min<int64_t>(128, t.global_shape[1] - c * 128)};
      t.chunks.push_back(
          {Box{{r * 8, c * 128}, shape}, writer,
           static_cast<uint64_t>(NumElements(shape) * 2),
           0x9e3779b97f4a7c15ull * static_cast<uint64_t>(r * cols + c)});
      writer = (writer + 131) % world;
    }
  }
  meta.info.nbytes = NumElements(t.global_shape) * 2;
  meta.tensors["w"] = t;
  meta.flat_mapping["w"] = {"w"};
  return meta;
}

// The number of segments of a serialized message (its first word's low half
// holds that number less one).
uint32_t Segments(const std::string& message) {
  uint32_t less_one = 0;
  std::memcpy(&less_one, message.data(), sizeof(less_one));
  return less_one + 1;
}

TEST(MetadataCodecTest, RecordsOfManyTensorsAreOneSegmentEach) {
  // A reader follows a pointer into another segment through a lookup under a
  // lock: a record in one segment reads without any.
  CheckpointMetadata meta = Sample();
  for (int i = 0; i < 5000; ++i) {
    const std::string index = std::to_string(i);
    const std::string key = "model.layers." + index + ".mlp.weight";
    TensorMetadata t{DType::kFloat32, {4, 2, 3}, {}};
    t.chunks.push_back(
        {Box{{0, 0, 0}, {2, 2, 3}}, 0, 48, 7, 0, ContentHash{1, 2}});
    t.chunks.push_back(
        {Box{{2, 0, 0}, {2, 2, 3}}, 1, 48, 8, 0, ContentHash{3, 4}});
    meta.tensors[key] = t;
    meta.flat_mapping[key] = {"model", "layers", index, "mlp", "weight"};
    meta.path_kinds[key] = {PathPartKind::kStrKey, PathPartKind::kStrKey,
                            PathPartKind::kIntKey, PathPartKind::kStrKey,
                            PathPartKind::kStrKey};
    meta.info.nbytes += 96;
    const std::string value = "optimizer.state." + index + ".lr_name";
    meta.values[value] = Value(std::string(40, 'x'));
    meta.flat_mapping[value] = {"optimizer", "state", index, "lr_name"};
    meta.user_metadata["note" + index] = std::string(30, 'y');
  }
  meta.info.num_tensors = meta.tensors.size();
  meta.info.tag = std::string(300, 't');
  const Records records = EncodeCheckpointRecords(meta);
  ASSERT_EQ(records.size(), 2u);  // the main record, the small tensors'
  for (const auto& [key, bytes] : records)
    EXPECT_EQ(Segments(bytes), 1u) << "record of " << bytes.size() << " bytes";
  auto decoded = DecodeCheckpointRecords(records);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->tensors.size(), meta.tensors.size());
  EXPECT_EQ(decoded->values, meta.values);
}

TEST(MetadataCodecTest, GridOfChunksCostsFewBytesEachAtAnyWorldSize) {
  for (int32_t world : {1, 128, 16384}) {
    const CheckpointMetadata meta = Grid(250, 400, world);  // 100,000 chunks
    const Records records = EncodeCheckpointRecords(meta);
    size_t bytes = 0;
    for (const auto& [key, value] : records) bytes += key.size() + value.size();
    const double per_chunk = static_cast<double>(bytes) / 100000;
    EXPECT_LE(per_chunk, world == 1 ? 10.0 : 13.0) << "world " << world;
    auto decoded = DecodeCheckpointRecords(records);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ExpectSameChunks(decoded->tensors.at("w").chunks,
                     meta.tensors.at("w").chunks, "grid");
  }
}

}  // namespace
}  // namespace ckptdb::storage
