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
  t.chunks.push_back({Box{{0, 0}, {2, 2}}, 1, 16, 111, 0, ContentHash{1, 2}});
  t.chunks.push_back({Box{{2, 0}, {2, 2}}, 0, 16, 222, 3, ContentHash{3, 4}});
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

TEST(IncrementalTest, CandidatesSoughtFromTheLastOneAreThoseOfALookup) {
  PreviousCheckpoint previous = TwoChunks();
  for (const char* key : {"a", "m", "z"})
    previous.tensors[key] = previous.tensors["w"];
  // Keys in order, one absent, one going back, then on again.
  auto near = previous.tensors.cbegin();
  for (const char* key : {"a", "b", "m", "w", "a", "x", "z", "zz"}) {
    SCOPED_TRACE(key);
    const ChunkMetadata* looked_up = CandidateChunk(
        previous, key, DType::kFloat32, {4, 2}, {{2, 0}, {2, 2}}, 2);
    const ChunkMetadata* sought = CandidateChunk(
        previous, key, DType::kFloat32, {4, 2}, {{2, 0}, {2, 2}}, 2, &near);
    EXPECT_EQ(sought, looked_up);
    EXPECT_EQ(sought != nullptr, previous.tensors.contains(key));
  }
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

// A new record whose chunks refer to TwoChunks() as DecideChunkSource would:
// the first to checkpoint 7 (which wrote it, rank 1), the second to
// checkpoint 3 (which 7 itself refers to, rank 0).
std::map<std::string, TensorMetadata> ReferringRecord() {
  std::map<std::string, TensorMetadata> tensors;
  TensorMetadata& t = tensors["w"];
  t.dtype = DType::kFloat32;
  t.global_shape = {4, 2};
  t.chunks.push_back({Box{{0, 0}, {2, 2}}, 1, 16, 111, 7, ContentHash{1, 2}});
  t.chunks.push_back({Box{{2, 0}, {2, 2}}, 0, 16, 222, 3, ContentHash{3, 4}});
  return tensors;
}

// A chunk is hashed before it is written only when its candidate refers to
// older bytes (the save that recorded it found it unchanged); a chunk that
// was written then (it changed), or has no candidate, is hashed as written.
TEST(IncrementalTest, OnlyAChunkFoundUnchangedLastTimeIsHashedBeforeWriting) {
  const PreviousCheckpoint previous = TwoChunks();
  const auto& chunks = previous.tensors.at("w").chunks;
  EXPECT_FALSE(HashBeforeWriting(&chunks[0]));  // written by checkpoint 7
  EXPECT_TRUE(HashBeforeWriting(&chunks[1]));   // refers to checkpoint 3
  EXPECT_FALSE(HashBeforeWriting(nullptr));
}

TEST(IncrementalTest, ReferencesAsDecidedPassTheCheck) {
  EXPECT_TRUE(CheckReferences(ReferringRecord(), TwoChunks(), 2).ok());
  // A written chunk needs nothing in the previous record.
  auto tensors = ReferringRecord();
  tensors["v"] = tensors["w"];
  for (auto& c : tensors["v"].chunks) c.holder_id = 0;
  EXPECT_TRUE(CheckReferences(tensors, TwoChunks(), 2).ok());
}

TEST(IncrementalTest, AReferenceOtherThanTheDecisionFailsTheCheck) {
  const PreviousCheckpoint previous = TwoChunks();
  auto expect_fails = [&](std::map<std::string, TensorMetadata> tensors,
                          const std::string& why, int32_t world = 2) {
    Status s = CheckReferences(tensors, previous, world);
    EXPECT_EQ(s.code(), StatusCode::kInternal) << why << ": " << s.ToString();
    EXPECT_NE(s.message().find("'w'"), std::string::npos) << s.ToString();
  };
  auto t = ReferringRecord();
  t["w"].chunks[0].writer_rank = 0;
  expect_fails(t, "writer rank");
  t = ReferringRecord();
  t["w"].chunks[1].checksum = 223;
  expect_fails(t, "checksum");
  t = ReferringRecord();
  t["w"].chunks[1].holder_id = 7;
  expect_fails(t, "holder: checkpoint 7 refers to 3 for it");
  t = ReferringRecord();
  t["w"].chunks[0].content_hash = ContentHash{1, 3};
  expect_fails(t, "content hash");
  t = ReferringRecord();
  t["w"].chunks[1].box.origin = {1, 0};
  expect_fails(t, "no chunk at that offset");
  t = ReferringRecord();
  t["w"].global_shape = {4, 3};
  expect_fails(t, "other global shape");
  expect_fails(ReferringRecord(), "writer rank outside the world", 1);
  EXPECT_FALSE(
      CheckReferences(ReferringRecord(), PreviousCheckpoint{}, 2).ok());
}

}  // namespace
}  // namespace ckptdb::planner
