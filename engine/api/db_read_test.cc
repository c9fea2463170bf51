// DB::Read of part of a tensor, DB::Verify's report and DB::CheckStore.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>

#include "ckptdb/db.h"
#include "engine/api/db_testing.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::OpenOrDie;
using testing::TempDir;
using E = IndexEntry;

std::string BoxToString(const Box& box) {
  return "offset " + ShapeToString(box.origin) + " shape " +
         ShapeToString(box.shape);
}

// A [rows, cols] int32 tensor whose element (r, c) is r * 1000 + c.
std::vector<int32_t> Grid(int64_t rows, int64_t cols) {
  std::vector<int32_t> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[static_cast<size_t>(r * cols + c)] =
          static_cast<int32_t>(r * 1000 + c);
    }
  }
  return out;
}

std::vector<int32_t> Values(const Tensor& t) {
  std::vector<int32_t> out(t.data.size() / sizeof(int32_t));
  if (!out.empty()) std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

// Saves a [64, 32] int32 "emb" (8 KiB, chunks of 8 rows = 1 KiB) and a value.
class PartialReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Options options;
    options.max_chunk_bytes = 1024;
    db_ = OpenOrDie(dir_.path(), options);
    ASSERT_NE(db_, nullptr);
    StateDict sd;
    sd.Set("emb", TensorView::Whole(grid_.data(), DType::kInt32, {64, 32}));
    sd.Set("scalar", TensorView::Whole(&scalar_, DType::kInt32, {}));
    sd.Set("lr", Value(0.5));
    ASSERT_TRUE(db_->Save(sd, {.step = 1}).ok());
  }

  Result<Tensor> Read(const std::string& key, const TensorIndex& index,
                      ReadStats* stats = nullptr) {
    return db_->Read(key, CheckpointSelector::Latest(), index, stats);
  }

  TempDir dir_;
  std::vector<int32_t> grid_ = Grid(64, 32);
  int32_t scalar_ = 42;
  std::unique_ptr<DB> db_;
};

TEST_F(PartialReadTest, ReadsOnlyTheChunksMeetingTheBox) {
  ReadStats stats;
  auto rows = Read("emb", {E::Range(10, 12)}, &stats);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_EQ(rows->shape, (Shape{2, 32}));
  EXPECT_EQ(Values(*rows), std::vector<int32_t>(grid_.begin() + 10 * 32,
                                                grid_.begin() + 12 * 32));
  // Rows 10 and 11 lie in the chunk of rows [8, 16): 1 KiB of the 8 KiB.
  EXPECT_EQ(stats.chunks_read, 1u);
  EXPECT_EQ(stats.bytes_read, 1024u);
  ReadStats across;
  auto box = db_->Read("emb", CheckpointSelector::Step(1), Box{{6, 3}, {4, 2}},
                       &across);
  ASSERT_TRUE(box.ok());
  EXPECT_EQ(Values(*box), (std::vector<int32_t>{6003, 6004, 7003, 7004, 8003,
                                                8004, 9003, 9004}));
  EXPECT_EQ(across.chunks_read, 2u);
  EXPECT_EQ(across.bytes_read, 2048u);
  ReadStats whole;
  auto all =
      db_->Read("emb", CheckpointSelector::Latest(), TensorIndex{}, &whole);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(Values(*all), grid_);
  EXPECT_EQ(whole.bytes_read, 64u * 32 * 4);
  EXPECT_EQ(whole.chunks_read, 8u);
}

TEST_F(PartialReadTest, IntsDropDimensionsLikeNumpy) {
  auto row = Read("emb", {E::At(-1)});
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(row->shape, (Shape{32}));
  EXPECT_EQ(Values(*row), std::vector<int32_t>(grid_.end() - 32, grid_.end()));
  auto column = Read("emb", {E::Range(), E::At(5)});
  ASSERT_TRUE(column.ok());
  ASSERT_EQ(column->shape, (Shape{64}));
  EXPECT_EQ(Values(*column)[63], 63005);
  auto element = Read("emb", {E::At(3), E::At(-2)});
  ASSERT_TRUE(element.ok());
  EXPECT_EQ(element->shape, Shape{});
  EXPECT_EQ(Values(*element), std::vector<int32_t>{3030});
  ReadStats none;
  auto empty = Read("emb", {E::Range(7, 7)}, &none);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->shape, (Shape{0, 32}));
  EXPECT_EQ(none.bytes_read, 0u);
  auto scalar = Read("scalar", {});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(Values(*scalar), std::vector<int32_t>{42});
}

TEST_F(PartialReadTest, SliceBoundsBeyondTheTensorAreClampedLikeNumpy) {
  ReadStats stats;
  auto tail = Read("emb", {E::Range(60, 100), E::Range(-100, 2)}, &stats);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  ASSERT_EQ(tail->shape, (Shape{4, 2}));
  EXPECT_EQ(Values(*tail)[0], 60000);
  EXPECT_EQ(Values(*tail)[7], 63001);
  ReadStats none;
  auto past = Read("emb", {E::Range(70, 80)}, &none);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->shape, (Shape{0, 32}));
  EXPECT_EQ(none.bytes_read, 0u);
  auto backwards = Read("emb", {E::Range(9, 3)});
  ASSERT_TRUE(backwards.ok());
  EXPECT_EQ(backwards->shape, (Shape{0, 32}));
}

TEST_F(PartialReadTest, BadIndexesAndKeysAreNamed) {
  for (const TensorIndex& bad :
       {TensorIndex{E::At(64)}, TensorIndex{E::Range(), E::At(-33)},
        TensorIndex{E::Range(0, 8, 2)},
        TensorIndex{E::At(0), E::At(0), E::At(0)}}) {
    auto read = Read("emb", bad);
    ASSERT_TRUE(read.status().IsInvalidArgument()) << IndexToString(bad);
    const std::string& m = read.status().message();
    EXPECT_NE(m.find("'emb'"), std::string::npos) << m;
    EXPECT_NE(m.find("[64, 32]"), std::string::npos) << m;
    EXPECT_NE(m.find(IndexToString(bad)), std::string::npos) << m;
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const Box& bad :
       {Box{{-2, 0}, {1, 32}}, Box{{0, 0}, {1, -1}}, Box{{0, 30}, {1, 4}},
        Box{{0}, {1, 1}}, Box{{kMax - 1, 0}, {3, 1}}}) {
    auto read = db_->Read("emb", CheckpointSelector::Latest(), bad);
    ASSERT_TRUE(read.status().IsInvalidArgument()) << BoxToString(bad);
    const std::string& m = read.status().message();
    EXPECT_NE(m.find("'emb'"), std::string::npos);
    // Bounds are the caller's numbers, never a wrapped sum.
    EXPECT_EQ(m.find("-9223372036854775"), std::string::npos) << m;
  }
  EXPECT_TRUE(Read("nope", {}).status().IsNotFound());
  EXPECT_NE(Read("nope", {}).status().message().find("'nope'"),
            std::string::npos);
  EXPECT_TRUE(Read("lr", {}).status().IsInvalidArgument());
  EXPECT_TRUE(
      db_->Read("emb", CheckpointSelector::Step(9)).status().IsNotFound());
}

// Random boxes of a tensor stored in chunks of 2 rows: every read equals the
// same box cut out of the whole tensor, and reads only the chunks of its rows.
TEST(PartialReadRandomTest, MatchesTheWholeTensor) {
  TempDir dir;
  Options options;
  options.max_chunk_bytes = 96;
  auto db = OpenOrDie(dir.path(), options);
  std::mt19937 rng(5);
  const Shape shape{13, 11};
  const std::vector<int32_t> grid = Grid(13, 11);
  StateDict sd;
  sd.Set("g", TensorView::Whole(const_cast<int32_t*>(grid.data()),
                                DType::kInt32, shape));
  ASSERT_TRUE(db->Save(sd, {}).ok());
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t r0 = rng() % 14, r1 = r0 + rng() % (14 - r0);
    const int64_t c0 = rng() % 12, c1 = c0 + rng() % (12 - c0);
    ReadStats stats;
    auto read = db->Read("g", CheckpointSelector::Latest(),
                         Box{{r0, c0}, {r1 - r0, c1 - c0}}, &stats);
    ASSERT_TRUE(read.ok()) << read.status().ToString();
    std::vector<int32_t> expected;
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t c = c0; c < c1; ++c) expected.push_back(grid[r * 11 + c]);
    }
    ASSERT_EQ(Values(*read), expected) << "rows " << r0 << ":" << r1;
    // Chunks hold 2 whole rows (88 bytes): those of rows r0..r1-1.
    const uint64_t chunks =
        r1 == r0 || c1 == c0 ? 0 : (r1 - 1) / 2 - r0 / 2 + 1;
    EXPECT_EQ(stats.chunks_read, chunks) << r0 << ":" << r1;
  }
}

// Flips a byte inside the stored copy of `probe` in the store's table and
// value files.
bool DamageStored(const std::string& dir, const std::string& probe) {
  return ckptdb::testing::DamageStoredBytes(dir, probe, 1);
}

TEST(PartialReadDamageTest, OnlyReadChunksAreVerifiedAndReported) {
  TempDir dir;
  Options options;
  options.max_chunk_bytes = 1 << 18;
  // 1 MiB: four chunks of 256 KiB, each in table blocks of its own.
  std::vector<int32_t> w(1 << 18);
  std::iota(w.begin(), w.end(), 0);
  {
    auto db = OpenOrDie(dir.path(), options);
    StateDict sd;
    sd.Set("w", TensorView::Whole(w.data(), DType::kInt32, {1 << 18}));
    ASSERT_TRUE(db->Save(sd, {}).ok());
  }
  const size_t at = 100000;  // in the chunk at offset 65536
  ASSERT_TRUE(DamageStored(
      dir.path(), std::string(reinterpret_cast<const char*>(&w[at]), 64)));
  options.read_only = true;
  auto db = OpenOrDie(dir.path(), options);
  ReadStats stats;
  auto intact =
      db->Read("w", CheckpointSelector::Latest(), Box{{200000}, {16}}, &stats);
  ASSERT_TRUE(intact.ok()) << intact.status().ToString();
  EXPECT_EQ(Values(*intact)[0], 200000);
  EXPECT_EQ(stats.bytes_read, 1u << 18);
  auto damaged =
      db->Read("w", CheckpointSelector::Latest(), Box{{99990}, {20}});
  ASSERT_TRUE(damaged.status().IsCorruption());
  EXPECT_NE(damaged.status().message().find("[65536]"), std::string::npos)
      << damaged.status().message();
  auto report = db->Verify(CheckpointSelector::Latest(), VerifyOptions());
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->chunks, 4u);
  EXPECT_EQ(report->damaged_chunks, 1u);
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_NE(report->problems[0].find("[65536]"), std::string::npos);
}

TEST(VerifyReportTest, CountsProgressAndTheStoreAsAWhole) {
  TempDir dir;
  Options options;
  options.max_chunk_bytes = 256;
  auto db = OpenOrDie(dir.path(), options);
  std::vector<int32_t> grid = Grid(16, 16);
  StateDict sd;
  sd.Set("g", TensorView::Whole(grid.data(), DType::kInt32, {16, 16}));
  ASSERT_TRUE(db->Save(sd, {.step = 3}).ok());
  uint64_t calls = 0, last = 0, total = 0;
  VerifyOptions verify;
  verify.on_progress = [&](uint64_t done, uint64_t of) {
    ++calls;
    EXPECT_GT(done, last);
    last = done;
    total = of;
  };
  auto report = db->Verify(CheckpointSelector::Step(3), verify);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->chunks, 4u);
  EXPECT_EQ(report->bytes, 1024u);
  EXPECT_EQ(calls, 4u);
  EXPECT_EQ(last, 1024u);
  EXPECT_EQ(total, 1024u);
  EXPECT_TRUE(db->Verify(CheckpointSelector::Step(3)).ok());
  EXPECT_TRUE(
      db->Verify(CheckpointSelector::Step(4), verify).status().IsNotFound());
  auto store = db->CheckStore();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_TRUE(store->ok());
  EXPECT_TRUE(store->unfinished_save_ids.empty());
}

}  // namespace
}  // namespace ckptdb
