// Stores written in metadata format 1 (one record per checkpoint, chunks
// inline) open, list, load, read and verify with today's code, and take new
// checkpoints (written in format 2) beside the old ones.
#include "tests/testing/format_v1.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "ckptdb/db.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::TempDir;

// The state of checkpoint `seed`: a [64, 16] matrix stored in row chunks, a
// 0-d scalar, an empty tensor and a value.
struct State {
  std::vector<float> w = std::vector<float>(64 * 16);
  double scalar = 0;
  int64_t empty = 0;
  explicit State(int seed) {
    std::iota(w.begin(), w.end(), static_cast<float>(seed * 1000));
    scalar = seed + 0.5;
  }
  StateDict Dict() {
    StateDict sd;
    sd.Child("model").Set(
        "w", TensorView::Whole(w.data(), DType::kFloat32, {64, 16}));
    sd.Child("model").Set("s", TensorView::Whole(&scalar, DType::kFloat64, {}));
    sd.Set("e", TensorView::Whole(&empty, DType::kInt64, {0, 4}));
    sd.Set("lr", Value(scalar));
    return sd;
  }
};

// Loads checkpoint `id` whole and as column shards and compares with `want`.
void ExpectLoads(DB& db, int64_t id, State& want) {
  State got(99);
  StateDict sd = got.Dict();
  auto loaded = db.Load(sd, CheckpointSelector::Id(id), {});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(got.w, want.w);
  EXPECT_EQ(got.scalar, want.scalar);
  EXPECT_EQ(*sd.GetValue("lr"), Value(want.scalar));
  // Columns 4..11 of rows 10..19: another layout.
  std::vector<float> part(10 * 8, -1.f);
  StateDict target;
  target.Child("model").Set("w", TensorView::Shard(part.data(), DType::kFloat32,
                                                   {10, 8}, {64, 16}, {10, 4}));
  auto resharded =
      db.Load(target, CheckpointSelector::Id(id), {.strict = false});
  ASSERT_TRUE(resharded.ok()) << resharded.status().ToString();
  for (int r = 0; r < 10; ++r) {
    for (int c = 0; c < 8; ++c)
      EXPECT_EQ(part[r * 8 + c], want.w[(10 + r) * 16 + 4 + c]);
  }
  EXPECT_TRUE(db.Verify(CheckpointSelector::Id(id)).ok());
  auto read = db.Read("model.w", CheckpointSelector::Id(id));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  ASSERT_EQ(read->data.size(), want.w.size() * 4);
  EXPECT_EQ(std::memcmp(read->data.data(), want.w.data(), read->data.size()),
            0);
  auto meta = db.GetMetadata(CheckpointSelector::Id(id));
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(meta->tensors.at("model.w").chunks.size(), 16u);
  EXPECT_EQ(meta->tensors.at("model.s").chunks.size(), 1u);
  EXPECT_TRUE(meta->tensors.at("e").chunks.empty());
}

TEST(FormatV1Test, StoreOfFormat1OpensListsLoadsAndVerifies) {
  TempDir dir;
  Options options;
  options.max_chunk_bytes = 4 * 16 * 4;  // 4 rows a chunk
  std::vector<State> states = {State(1), State(2)};
  {
    auto db = DB::Open(options, dir.path());
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    for (State& s : states) {
      StateDict sd = s.Dict();
      ASSERT_TRUE((*db)->Save(sd, {.step = static_cast<int64_t>(s.w[0])}).ok());
    }
  }
  ASSERT_TRUE(testing::RewriteAsFormat1(dir.path()).ok());
  for (bool read_only : {true, false}) {
    Options open = options;
    open.read_only = read_only;
    auto db = DB::Open(open, dir.path());
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    auto list = (*db)->ListCheckpoints();
    ASSERT_TRUE(list.ok()) << list.status().ToString();
    ASSERT_EQ(list->size(), 2u);
    for (size_t i = 0; i < states.size(); ++i)
      ExpectLoads(**db, (*list)[i].id, states[i]);
  }
  // A new checkpoint (format 2) beside them; then the old ones deleted.
  auto db = DB::Open(options, dir.path());
  ASSERT_TRUE(db.ok());
  states.emplace_back(3);
  StateDict sd = states.back().Dict();
  auto third = (*db)->Save(sd, {});
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  for (size_t i = 0; i < states.size(); ++i)
    ExpectLoads(**db, static_cast<int64_t>(i + 1), states[i]);
  ASSERT_TRUE((*db)->Delete(CheckpointSelector::Id(1)).ok());
  auto list = (*db)->ListCheckpoints();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 2u);
  ExpectLoads(**db, 2, states[1]);
  ExpectLoads(**db, 3, states[2]);
}

}  // namespace
}  // namespace ckptdb
