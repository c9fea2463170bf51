// Blocking and background saves of a multi-rank job take different paths to
// the same record: rank 0 of a blocking save records the plan it wrote from,
// a background save plans the whole save again at its commit.
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "ckptdb/db.h"
#include "tests/testing/random_bytes.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::RandomBytes;
using testing::TempDir;

constexpr int kRanks = 3;

// What three ranks hold: a float32 [30, 64] split by rows, an int64 [200, 9]
// on every rank, a float16 [40, 33] whose first half ranks 0 and 1 both hold
// and whose second half rank 2 holds alone, and a small value.
struct JobState {
  std::vector<uint8_t> sharded = RandomBytes(30 * 64 * 4, 1);
  std::vector<uint8_t> replicated = RandomBytes(200 * 9 * 8, 2);
  std::vector<uint8_t> pair = RandomBytes(40 * 33 * 2, 3);

  StateDict OfRank(int rank) {
    StateDict sd;
    const int64_t rows = 30 / kRanks;
    sd.Child("model").Set(
        "sharded", TensorView::Shard(sharded.data() + rank * rows * 64 * 4,
                                     DType::kFloat32, {rows, 64}, {30, 64},
                                     {rank * rows, 0}));
    sd.Set("replicated",
           TensorView::Whole(replicated.data(), DType::kInt64, {200, 9}));
    const int64_t first = rank < 2 ? 0 : 20;
    sd.Set("pair",
           TensorView::Shard(pair.data() + first * 33 * 2, DType::kFloat16,
                             {20, 33}, {40, 33}, {first, 0}));
    sd.Set("step_count", Value(int64_t{7}));
    return sd;
  }
};

// Every rank of an in-process job saves its part of `state` as step 1 into
// `dir`, in the background or not.
void SaveFromEveryRank(const std::string& dir, JobState& state,
                       bool background) {
  Options options;
  options.max_chunk_bytes = 4 << 10;
  auto comms = InProcessCommunicators(kRanks);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      auto db = DB::Open(options, dir, comms[rank]);
      ASSERT_TRUE(db.ok()) << db.status().ToString();
      const StateDict sd = state.OfRank(rank);
      Result<CheckpointInfo> info = Status::Internal("not saved");
      if (background) {
        auto pending = (*db)->SaveAsync(sd, {.step = 1});
        ASSERT_TRUE(pending.ok()) << pending.status().ToString();
        info = (*pending)->Wait();
      } else {
        info = (*db)->Save(sd, {.step = 1});
      }
      ASSERT_TRUE(info.ok())
          << "rank " << rank << ": " << info.status().ToString();
      ASSERT_TRUE((*db)->Close().ok());
    });
  }
  for (auto& t : ranks) t.join();
}

// The metadata of step 1 in the store at `dir`.
CheckpointMetadata StepOne(const std::string& dir) {
  auto db = DB::Open({}, dir);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  if (!db.ok()) return {};
  auto meta = (*db)->GetMetadata(CheckpointSelector::Step(1));
  EXPECT_TRUE(meta.ok()) << meta.status().ToString();
  return meta.ok() ? *meta : CheckpointMetadata{};
}

// Checks that `a` and `b` record the same tensors, chunk by chunk; the set of
// ranks that wrote a's chunks goes to `writers`.
void ExpectSameChunks(const CheckpointMetadata& a, const CheckpointMetadata& b,
                      std::set<int32_t>* writers) {
  ASSERT_EQ(a.tensors.size(), 3u);
  ASSERT_EQ(b.tensors.size(), 3u);
  for (const auto& [key, t] : a.tensors) {
    const TensorMetadata& other = b.tensors.at(key);
    EXPECT_EQ(t.dtype, other.dtype) << key;
    EXPECT_EQ(t.global_shape, other.global_shape) << key;
    ASSERT_EQ(t.chunks.size(), other.chunks.size()) << key;
    EXPECT_GT(t.chunks.size(), 1u) << key;
    for (size_t c = 0; c < t.chunks.size(); ++c) {
      EXPECT_EQ(t.chunks[c].box, other.chunks[c].box) << key << " chunk " << c;
      EXPECT_EQ(t.chunks[c].writer_rank, other.chunks[c].writer_rank)
          << key << " chunk " << c;
      EXPECT_EQ(t.chunks[c].nbytes, other.chunks[c].nbytes) << key;
      EXPECT_EQ(t.chunks[c].checksum, other.chunks[c].checksum) << key;
      writers->insert(t.chunks[c].writer_rank);
    }
  }
  EXPECT_EQ(a.flat_mapping, b.flat_mapping);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.info.nbytes, b.info.nbytes);
}

TEST(SavePathsTest, BlockingAndBackgroundSavesOfThreeRanksRecordTheSameChunks) {
  TempDir blocking_dir, background_dir;
  JobState state;
  ASSERT_NO_FATAL_FAILURE(SaveFromEveryRank(blocking_dir.path(), state, false));
  ASSERT_NO_FATAL_FAILURE(
      SaveFromEveryRank(background_dir.path(), state, true));
  std::set<int32_t> writers;
  ASSERT_NO_FATAL_FAILURE(ExpectSameChunks(
      StepOne(blocking_dir.path()), StepOne(background_dir.path()), &writers));
  EXPECT_EQ(writers, (std::set<int32_t>{0, 1, 2}));
  // And the blocking save loads back on one rank.
  auto db = DB::Open({}, blocking_dir.path());
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  std::vector<uint8_t> whole(state.sharded.size(), 0);
  StateDict target;
  target.Child("model").Set(
      "sharded", TensorView::Whole(whole.data(), DType::kFloat32, {30, 64}));
  ASSERT_TRUE(
      (*db)->Load(target, CheckpointSelector::Step(1), {.strict = false}).ok());
  EXPECT_EQ(whole, state.sharded);
}

}  // namespace
}  // namespace ckptdb
