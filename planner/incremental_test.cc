#include "planner/incremental.h"

#include <gtest/gtest.h>

namespace ckptdb::planner {
namespace {

PreviousCheckpoint TwoChunks() {
  PreviousCheckpoint previous;
  previous.id = 7;
  TensorMetadata& t = previous.tensors["w"];
  t.dtype = DType::kFloat32;
  t.global_shape = {4, 2};
  t.chunks.push_back({{0, 0}, {2, 2}, 1, 16, 111, 0, ContentHash{1, 2}});
  t.chunks.push_back({{2, 0}, {2, 2}, 0, 16, 222, 3, ContentHash{3, 4}});
  return previous;
}

TEST(IncrementalTest, CandidateIsTheSameBoxOfTheSameKeyDtypeAndShape) {
  const PreviousCheckpoint previous = TwoChunks();
  const ChunkMetadata* c =
      CandidateChunk(previous, "w", DType::kFloat32, {4, 2}, {{2, 0}, {2, 2}},
                     /*world=*/2);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->checksum, 222u);
  EXPECT_EQ(CandidateChunk(previous, "v", DType::kFloat32, {4, 2},
                           {{2, 0}, {2, 2}}, 2),
            nullptr);
  EXPECT_EQ(
      CandidateChunk(previous, "w", DType::kInt32, {4, 2}, {{2, 0}, {2, 2}}, 2),
      nullptr);
  EXPECT_EQ(CandidateChunk(previous, "w", DType::kFloat32, {5, 2},
                           {{2, 0}, {2, 2}}, 2),
            nullptr);
  EXPECT_EQ(CandidateChunk(previous, "w", DType::kFloat32, {4, 2},
                           {{2, 0}, {1, 2}}, 2),
            nullptr);
  EXPECT_EQ(CandidateChunk(previous, "w", DType::kFloat32, {4, 2},
                           {{1, 0}, {2, 2}}, 2),
            nullptr);
}

TEST(IncrementalTest, NoCandidateWithoutHashOrWithAWriterOutsideTheWorld) {
  PreviousCheckpoint previous = TwoChunks();
  EXPECT_EQ(CandidateChunk(previous, "w", DType::kFloat32, {4, 2},
                           {{0, 0}, {2, 2}}, /*world=*/1),
            nullptr);
  previous.tensors["w"].chunks[1].content_hash.reset();
  EXPECT_EQ(CandidateChunk(previous, "w", DType::kFloat32, {4, 2},
                           {{2, 0}, {2, 2}}, 2),
            nullptr);
}

TEST(IncrementalTest, ReusesOnlyOnAnEqual128BitHashFromTheHolder) {
  const PreviousCheckpoint previous = TwoChunks();
  const auto& chunks = previous.tensors.at("w").chunks;
  // Held by the previous checkpoint itself.
  EXPECT_EQ(DecideChunkSource(&chunks[0], 7, ContentHash{1, 2}),
            (ChunkSource{true, 7, 1, 111}));
  // Held, in turn, by checkpoint 3.
  EXPECT_EQ(DecideChunkSource(&chunks[1], 7, ContentHash{3, 4}),
            (ChunkSource{true, 3, 0, 222}));
  // Equal low or high half alone is not equality.
  EXPECT_FALSE(DecideChunkSource(&chunks[0], 7, ContentHash{1, 9}).reuse);
  EXPECT_FALSE(DecideChunkSource(&chunks[0], 7, ContentHash{9, 2}).reuse);
  EXPECT_FALSE(DecideChunkSource(nullptr, 7, ContentHash{1, 2}).reuse);
}

}  // namespace
}  // namespace ckptdb::planner
