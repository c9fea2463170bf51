#include "storage/metadata_codec.h"

#include <gtest/gtest.h>

#include <random>

namespace ckptdb::storage {
namespace {

CheckpointMetadata Sample() {
  CheckpointMetadata meta;
  meta.info.id = 3;
  meta.info.step = 100;
  meta.info.tag = "best";
  meta.info.created = 1700000000.5;
  meta.info.world_size = 2;
  TensorMetadata w{DType::kBFloat16, {4, 2}, {}};
  w.chunks.push_back({{2, 0}, {2, 2}, 1, 8, 0xabc});
  w.chunks.push_back({{0, 0}, {2, 2}, 0, 8, 0xdef});
  meta.tensors["model.w"] = w;
  meta.tensors["s"] = TensorMetadata{DType::kFloat64, {}, {{{}, {}, 0, 8, 1}}};
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
                       {"n", {"n"}}};
  meta.values = {{"lr", Value(0.125)},
                 {"name", Value(std::string("gpt"))},
                 {"blob", Value(Bytes{std::string("\0\1\2", 3)})},
                 {"on", Value(true)},
                 {"n", Value(int64_t{-5})}};
  meta.user_metadata = {{"git", "abc123"}};
  return meta;
}

TEST(MetadataCodecTest, RoundTrip) {
  CheckpointMetadata meta = Sample();
  auto decoded = DecodeCheckpoint(EncodeCheckpoint(meta));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->info.id, 3);
  EXPECT_EQ(decoded->info.step, 100);
  EXPECT_EQ(decoded->info.tag, "best");
  EXPECT_EQ(decoded->info.created, 1700000000.5);
  EXPECT_EQ(decoded->info.num_tensors, 3);
  const auto& w = decoded->tensors.at("model.w");
  EXPECT_EQ(w.dtype, DType::kBFloat16);
  ASSERT_EQ(w.chunks.size(), 2u);
  EXPECT_EQ(w.chunks[0].global_offset, (Shape{0, 0}));  // sorted
  EXPECT_EQ(w.chunks[0].checksum, 0xdefu);
  EXPECT_EQ(w.chunks[1].writer_rank, 1);
  EXPECT_EQ(decoded->flat_mapping, meta.flat_mapping);
  EXPECT_EQ(decoded->values, meta.values);
  EXPECT_EQ(decoded->user_metadata, meta.user_metadata);
  auto info = DecodeCheckpointInfo(EncodeCheckpoint(meta));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->nbytes, 24);
}

void ExpectCorruption(const CheckpointMetadata& meta,
                      const std::string& needle) {
  auto decoded = DecodeCheckpoint(EncodeCheckpoint(meta));
  ASSERT_FALSE(decoded.ok());
  EXPECT_TRUE(decoded.status().IsCorruption());
  EXPECT_NE(decoded.status().message().find(needle), std::string::npos)
      << decoded.status().ToString();
}

TEST(MetadataCodecTest, RejectsInconsistentRecords) {
  CheckpointMetadata meta = Sample();
  meta.tensors["model.w"].chunks[0].global_offset = {3, 0};
  ExpectCorruption(meta, "outside its shape");
  meta = Sample();
  meta.tensors["model.w"].chunks[0].nbytes = 9;
  ExpectCorruption(meta, "records 9 bytes for 4 elements");
  meta = Sample();
  meta.tensors["model.w"].chunks.pop_back();
  meta.info.nbytes = 16;
  ExpectCorruption(meta, "chunks hold 4 of 8 elements");
  meta = Sample();
  meta.tensors["model.w"].chunks[0].writer_rank = 5;
  ExpectCorruption(meta, "writer rank 5");
  meta = Sample();
  meta.tensors["model.w"].global_shape = {4, -2};
  ExpectCorruption(meta, "extent -2");
  meta = Sample();
  meta.info.nbytes = 1;
  ExpectCorruption(meta, "the record says 1");
}

TEST(MetadataCodecTest, RejectsOverlapThatHidesAGapOfTheSameVolume) {
  // Rows [0, 2) and [1, 3) of [4, 2]: 8 elements held, as many as the tensor
  // has, but row 1 twice and row 3 never.
  CheckpointMetadata meta = Sample();
  meta.tensors["model.w"].chunks[0].global_offset = {1, 0};
  ExpectCorruption(meta, "tensor 'model.w'");
  ExpectCorruption(meta, "overlap");
  ExpectCorruption(meta, "[1, 0]");
  // A chunk of no element was never written: a damaged record.
  meta = Sample();
  meta.tensors["model.w"].chunks.push_back({{4, 0}, {0, 2}, 0, 0, 0});
  ExpectCorruption(meta, "empty chunk at [4, 0]");
}

TEST(MetadataCodecTest, HostileBytesNeverCrash) {
  const std::string good = EncodeCheckpoint(Sample());
  std::mt19937 rng(7);
  int rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bad = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f)
      bad[rng() % bad.size()] = static_cast<char>(rng());
    if (trial % 5 == 0) bad.resize((rng() % (bad.size() / 8)) * 8);
    auto decoded = DecodeCheckpoint(bad);
    if (!decoded.ok()) {
      EXPECT_TRUE(decoded.status().IsCorruption())
          << decoded.status().ToString();
      ++rejected;
    }
    (void)DecodeCheckpointInfo(bad);
  }
  EXPECT_GT(rejected, 100);
  EXPECT_FALSE(DecodeCheckpoint("").ok());
  EXPECT_FALSE(DecodeCheckpoint("12345").ok());
}

}  // namespace
}  // namespace ckptdb::storage
