#include "planner/incremental.h"

#include <gtest/gtest.h>

#include <random>

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
  const PreviousCheckpoint previous = TwoChunks();
  EXPECT_TRUE(CheckReferences(ReferringRecord(), {&previous}, 2).ok());
  // A written chunk needs nothing in the previous record.
  auto tensors = ReferringRecord();
  tensors["v"] = tensors["w"];
  for (auto& c : tensors["v"].chunks) c.holder_id = 0;
  EXPECT_TRUE(CheckReferences(tensors, {&previous}, 2).ok());
}

TEST(IncrementalTest, AReferenceOtherThanTheDecisionFailsTheCheck) {
  const PreviousCheckpoint previous = TwoChunks();
  auto expect_fails = [&](std::map<std::string, TensorMetadata> tensors,
                          const std::string& why, int32_t world = 2) {
    Status s = CheckReferences(tensors, {&previous}, world);
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
  EXPECT_FALSE(CheckReferences(ReferringRecord(), {}, 2).ok());
}

TEST(IncrementalTest, ComparedIdsAreTheNewestUpToTheDepthNewestFirst) {
  EXPECT_EQ(ComparedIds({1, 2, 5, 9}, 2), (std::vector<int64_t>{9, 5}));
  EXPECT_EQ(ComparedIds({1, 2}, 4), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ComparedIds({}, 4), (std::vector<int64_t>{}));
  EXPECT_EQ(ComparedIds({3}, 1), (std::vector<int64_t>{3}));
}

// Checkpoint `id` with one chunk of "w" whose content hash is `hash`, written
// by it (holder 0) or referring to checkpoint `holder`.
PreviousCheckpoint OneChunk(int64_t id, ContentHash hash, int64_t holder = 0) {
  PreviousCheckpoint previous;
  previous.id = id;
  TensorMetadata& t = previous.tensors["w"];
  t.dtype = DType::kFloat32;
  t.global_shape = {2};
  t.chunks.push_back(
      {Box{{0}, {2}}, 0, 8, static_cast<uint64_t>(100 + id), holder, hash});
  return previous;
}

// The decision among all of Find's candidates: the stored bytes of the
// newest whose hash is `hash` (what CandidateFinder::Decide must give).
ChunkSource NewestEqual(const std::vector<Candidate>& candidates,
                        const ContentHash& hash) {
  for (const Candidate& c : candidates) {
    const ChunkSource source =
        DecideChunkSource(c.chunk, c.checkpoint_id, hash);
    if (source.reuse) return source;
  }
  return {};
}

TEST(IncrementalTest, AStateThatGoesBackSharesTheBytesOfAnOlderCheckpoint) {
  // Saved A (id 1), then B (id 2): a save of A again compares with both.
  const PreviousCheckpoint a = OneChunk(1, ContentHash{1, 1});
  const PreviousCheckpoint b = OneChunk(2, ContentHash{2, 2});
  const ComparedCheckpoints compared{&b, &a};
  CandidateFinder finder(compared, 1);
  const auto& found = finder.Find("w", DType::kFloat32, {2}, {{0}, {2}});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].checkpoint_id, 2);  // newest first
  EXPECT_EQ(found[1].checkpoint_id, 1);
  EXPECT_EQ(NewestEqual(found, ContentHash{1, 1}),
            (ChunkSource{true, 1, 0, 101}));
  EXPECT_EQ(NewestEqual(found, ContentHash{2, 2}),
            (ChunkSource{true, 2, 0, 102}));
  EXPECT_FALSE(NewestEqual(found, ContentHash{3, 3}).reuse);
  // B was written by its save (the state changed): hashed as it is written.
  EXPECT_FALSE(HashBeforeWriting(found.front().chunk));
  // The check accepts the reference to A's bytes, and no other.
  std::map<std::string, TensorMetadata> record = a.tensors;
  record["w"].chunks[0].holder_id = 1;
  EXPECT_TRUE(CheckReferences(record, compared, 1).ok());
  EXPECT_FALSE(CheckReferences(record, {&b}, 1).ok());
  record["w"].chunks[0].holder_id = 2;
  EXPECT_FALSE(CheckReferences(record, compared, 1).ok());
}

// Begin and Decide give Find's candidates' decision, reading an older
// checkpoint's record only when its set of content hashes holds the chunk's.
TEST(IncrementalTest, LazyDecisionsAreThoseOfEveryCandidate) {
  PreviousCheckpoint a = OneChunk(1, ContentHash{1, 1});
  PreviousCheckpoint b = OneChunk(2, ContentHash{2, 2});
  PreviousCheckpoint c = OneChunk(3, ContentHash{3, 3}, 1);
  for (PreviousCheckpoint* p : {&a, &b, &c}) IndexHashes(p);
  const ComparedCheckpoints compared{&c, &b, &a};
  const std::string key = "w";
  const Shape shape = {2};
  const Box box{{0}, {2}};
  for (const ContentHash hash :
       {ContentHash{1, 1}, ContentHash{2, 2}, ContentHash{3, 3},
        ContentHash{4, 4}, ContentHash{}}) {
    CandidateFinder eager(compared, 1), lazy(compared, 1);
    const auto& found = eager.Find("w", DType::kFloat32, {2}, {{0}, {2}});
    const ChunkMetadata* newest = lazy.Begin(key, DType::kFloat32, shape, box);
    EXPECT_EQ(newest, found.front().chunk);
    EXPECT_EQ(lazy.Decide(hash), NewestEqual(found, hash)) << hash.low;
  }
  // Another global shape has no candidate in any of them.
  CandidateFinder lazy(compared, 1);
  const Shape other = {3};
  EXPECT_EQ(lazy.Begin(key, DType::kFloat32, other, box), nullptr);
  EXPECT_FALSE(lazy.Decide(ContentHash{1, 1}).reuse);
}

TEST(IncrementalTest, AContentHashSetHoldsEveryRecordedHashAndNoOther) {
  std::map<std::string, TensorMetadata> tensors;
  std::mt19937_64 rng(7);
  std::vector<ContentHash> held;
  for (int t = 0; t < 50; ++t) {
    std::string key = "t";  // appended: GCC 12 warns wrongly of "t" + ...
    key += std::to_string(t);
    TensorMetadata& tensor = tensors[key];
    for (int c = 0; c < 3; ++c) {
      ChunkMetadata chunk;
      if (c != 2) {
        // Low halves that collide in the table, and one hash of zeros.
        ContentHash hash{(rng() % 4) << 20, rng()};
        if (t == 0 && c == 0) hash = ContentHash{};
        chunk.content_hash = hash;
        held.push_back(hash);
      }
      tensor.chunks.push_back(chunk);
    }
  }
  const ContentHashSet set(tensors);
  for (const ContentHash& hash : held) EXPECT_TRUE(set.Contains(hash));
  for (int i = 0; i < 1000; ++i)
    EXPECT_FALSE(set.Contains(ContentHash{(rng() % 4) << 20, rng()}));
  EXPECT_FALSE(ContentHashSet().Contains(ContentHash{1, 2}));
  EXPECT_FALSE(ContentHashSet().Contains(ContentHash{}));
  EXPECT_FALSE(ContentHashSet(std::map<std::string, TensorMetadata>())
                   .Contains(ContentHash{}));
}

TEST(IncrementalTest,
     TheNewestEqualCandidateDecidesAndAnyEqualOnePassesTheCheck) {
  // Checkpoint 3 refers to checkpoint 1's bytes for the chunk; checkpoint 2
  // wrote the same content again (a save that did not compare with 1).
  const PreviousCheckpoint three = OneChunk(3, ContentHash{7, 7}, 1);
  const PreviousCheckpoint two = OneChunk(2, ContentHash{7, 7});
  const ComparedCheckpoints compared{&three, &two};
  CandidateFinder finder(compared, 1);
  const auto& found = finder.Find("w", DType::kFloat32, {2}, {{0}, {2}});
  EXPECT_EQ(NewestEqual(found, ContentHash{7, 7}),
            (ChunkSource{true, 1, 0, 103}));
  // The newest was found unchanged by its save.
  EXPECT_TRUE(HashBeforeWriting(found.front().chunk));
  std::map<std::string, TensorMetadata> record = two.tensors;
  for (int64_t holder : {1, 2}) {
    SCOPED_TRACE(holder);
    record["w"].chunks[0].holder_id = holder;
    record["w"].chunks[0].checksum = holder == 1 ? 103 : 102;
    EXPECT_TRUE(CheckReferences(record, compared, 1).ok());
  }
}

TEST(IncrementalTest, AFinderSkipsCheckpointsWithoutTheChunk) {
  const PreviousCheckpoint a = OneChunk(1, ContentHash{1, 1});
  PreviousCheckpoint other = OneChunk(2, ContentHash{2, 2});
  other.tensors["w"].global_shape = {3};  // another shape: not comparable
  PreviousCheckpoint empty;
  empty.id = 3;
  const ComparedCheckpoints compared{&empty, &other, &a};
  CandidateFinder finder(compared, 1);
  for (const char* key : {"a", "w", "x"}) {
    SCOPED_TRACE(key);
    const auto& found = finder.Find(key, DType::kFloat32, {2}, {{0}, {2}});
    if (std::string(key) != "w") {
      EXPECT_TRUE(found.empty());
      continue;
    }
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].checkpoint_id, 1);
  }
}

}  // namespace
}  // namespace ckptdb::planner
