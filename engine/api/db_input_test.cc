// Input a save or load refuses, naming it, with the store left as it was:
// layouts, dtypes and shapes no record holds, text that is not UTF-8.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "ckptdb/db.h"
#include "engine/api/db_testing.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::Buf;
using testing::OpenOrDie;
using testing::SnapshotDir;
using testing::TempDir;

TEST(DBTest, InvalidSavesLeaveTheStoreUnchanged) {
  TempDir dir;
  auto db = OpenOrDie(dir.path());
  Buf ok(DType::kFloat32, {4});
  StateDict good;
  good.Set("w", ok.Whole());
  ASSERT_TRUE(db->Save(good, {.tag = "t"}).ok());
  // Every file of the store, byte for byte, while it stays open.
  const auto before = SnapshotDir(dir.path());

  Buf part(DType::kFloat32, {2});
  std::vector<std::pair<std::string, StateDict>> bad;
  {
    StateDict sd;  // collision
    sd.Child("a").Set("b", ok.Whole());
    sd.Set("a.b", ok.Whole());
    bad.emplace_back("collides", sd);
  }
  {
    StateDict sd;  // gap: only half of a tensor of 4
    sd.Set("w", TensorView::Shard(part.bytes.data(), DType::kFloat32, {2}, {4},
                                  {0}));
    bad.emplace_back("cover 2 of 4 elements", sd);
  }
  {
    StateDict sd;  // out of bounds
    sd.Set("w", TensorView::Shard(part.bytes.data(), DType::kFloat32, {2}, {4},
                                  {3}));
    bad.emplace_back("lies outside the global shape [4]", sd);
  }
  {
    StateDict sd;  // a negative extent says so
    sd.Set("w", TensorView::Whole(part.bytes.data(), DType::kFloat32, {-4, 6}));
    bad.emplace_back(
        "global shape [-4, 6] and global offset [0, 0] must not be negative",
        sd);
  }
  {
    StateDict sd;  // ranks disagree
    sd.Set("w", TensorView::Shard(part.bytes.data(), DType::kFloat32, {2, 1},
                                  {4}, {0}));
    bad.emplace_back("same number of dimensions", sd);
  }
  {
    StateDict sd;  // null data
    sd.Set("w", TensorView::Whole(nullptr, DType::kFloat32, {4}));
    bad.emplace_back("data pointer is null", sd);
  }
  for (auto& [needle, sd] : bad) {
    auto info = db->Save(sd, {});
    ASSERT_FALSE(info.ok()) << needle;
    EXPECT_TRUE(info.status().IsInvalidArgument()) << info.status().ToString();
    EXPECT_NE(info.status().message().find(needle), std::string::npos)
        << info.status().ToString();
  }
  auto dup = db->Save(good, {.tag = "t"});
  ASSERT_FALSE(dup.ok());
  EXPECT_TRUE(dup.status().IsInvalidArgument());
  EXPECT_NE(
      dup.status().message().find("tag 't' already names checkpoint id 1"),
      std::string::npos);
  EXPECT_EQ(SnapshotDir(dir.path()), before);
  EXPECT_EQ(db->ListCheckpoints()->size(), 1u);
}

TEST(DBTest, RejectsUnknownDtypeAndOverflowingShapes) {
  testing::TempDir dir;
  auto db = DB::Open(Options(), dir.path());
  ASSERT_TRUE(db.ok());
  float x = 0;
  StateDict sd;
  TensorView bad = TensorView::Whole(&x, DType::kFloat32, {1});
  bad.dtype = static_cast<DType>(77);
  sd.Set("x", bad);
  auto info = (*db)->Save(sd, {});
  EXPECT_TRUE(info.status().IsInvalidArgument());
  EXPECT_NE(info.status().message().find("unknown dtype code 77"),
            std::string::npos);
  sd.Set("x", TensorView::Shard(&x, DType::kFloat32, {1, 1},
                                {int64_t{1} << 40, int64_t{1} << 40}, {0, 0}));
  info = (*db)->Save(sd, {});
  EXPECT_TRUE(info.status().IsInvalidArgument());
  EXPECT_NE(info.status().message().find("is too large"), std::string::npos)
      << info.status().ToString();
}

TEST(DBTest, RefusesShapesThatNoRecordHoldsAndCommitsNothing) {
  // Beyond kMaxTensorDims dimensions, or an extent beyond kMaxTensorExtent
  // (a tensor with a 0 extent holds no bytes however large the others are):
  // a checkpoint's readers refuse such a record, so a save must not commit it.
  testing::TempDir dir;
  auto db = DB::Open(Options(), dir.path());
  ASSERT_TRUE(db.ok());
  float x[4] = {1, 2, 3, 4};
  StateDict good;
  good.Set("w", TensorView::Whole(x, DType::kFloat32, {4}));
  ASSERT_TRUE((*db)->Save(good, {.step = 1}).ok());
  const Shape deep(kMaxTensorDims + 1, 1);
  const Shape wide{0, kMaxTensorExtent + 1};
  for (const Shape& shape : {deep, wide}) {
    StateDict sd;
    sd.Set("w", TensorView::Whole(x, DType::kFloat32, {4}));
    sd.Set("odd", TensorView::Whole(x, DType::kFloat32, shape));
    auto info = (*db)->Save(sd, {.step = 2});
    ASSERT_TRUE(info.status().IsInvalidArgument()) << info.status().ToString();
    EXPECT_NE(info.status().message().find("tensor 'odd'"), std::string::npos)
        << info.status().ToString();
  }
  const Shape most(kMaxTensorDims, 1);
  StateDict deepest;
  deepest.Set("odd", TensorView::Whole(x, DType::kFloat32, most));
  ASSERT_TRUE((*db)->Save(deepest, {.step = 3}).ok());
  auto listed = (*db)->ListCheckpoints();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ(listed->front().step, 1);
  float back = 0;
  StateDict target;
  target.Set("odd", TensorView::Whole(&back, DType::kFloat32, most));
  ASSERT_TRUE((*db)->Load(target, CheckpointSelector::Latest(), {}).ok());
  EXPECT_EQ(back, 1);
}

// Strides whose byte offsets pass what 64 bits hold would wrap around to
// memory outside the view: a save refuses them before reading anything, a
// load before writing anything, naming the key and the strides.
TEST(DBTest, StridesBeyond64BitOffsetsAreRefusedNamingThem) {
  testing::TempDir dir;
  auto db = DB::Open(Options(), dir.path());
  ASSERT_TRUE(db.ok());
  float memory[8] = {103, 0, 1, 2, 3, 9, 9, 9};
  float* x = memory + 1;
  StateDict good;
  good.Set("w", TensorView::Whole(x, DType::kFloat32, {2, 2}));
  ASSERT_TRUE((*db)->Save(good, {.step = 1}).ok());
  const int64_t max = std::numeric_limits<int64_t>::max();
  for (const Shape& strides : std::vector<Shape>{{max / 2, 1},
                                                 {max, 1},
                                                 {max / 4 + 1, 1},
                                                 {1, max / 4 + 1},
                                                 {max / 8 + 1, max / 8 + 1}}) {
    StateDict sd;
    sd.Set("w",
           TensorView::Whole(x, DType::kFloat32, {2, 2}).WithStrides(strides));
    auto saved = (*db)->Save(sd, {.step = 2});
    ASSERT_TRUE(saved.status().IsInvalidArgument())
        << ShapeToString(strides) << ": " << saved.status().ToString();
    EXPECT_NE(saved.status().message().find("tensor 'w'"), std::string::npos);
    EXPECT_NE(saved.status().message().find(ShapeToString(strides)),
              std::string::npos)
        << saved.status().ToString();
    auto loaded = (*db)->Load(sd, CheckpointSelector::Latest(), {});
    ASSERT_TRUE(loaded.status().IsInvalidArgument())
        << ShapeToString(strides) << ": " << loaded.status().ToString();
  }
  EXPECT_EQ((*db)->ListCheckpoints()->size(), 1u);
  EXPECT_EQ(std::vector<float>(memory, memory + 8),
            (std::vector<float>{103, 0, 1, 2, 3, 9, 9, 9}));
  // Strides that fit are taken (a column of the 2 x 2 array).
  StateDict column;
  column.Set("c", TensorView::Whole(x, DType::kFloat32, {2}).WithStrides({2}));
  ASSERT_TRUE((*db)->Save(column, {.step = 3}).ok());
}

// An integer beyond 64 bits is a BigInt of its decimal digits: one that
// int64_t holds, or digits in another form, is refused naming the key, and
// nothing is committed; a valid one reads back.
TEST(DBTest, ABigIntIsAnIntegerBeyond64BitsInDecimalDigits) {
  testing::TempDir dir;
  auto db = DB::Open(Options(), dir.path());
  ASSERT_TRUE(db.ok());
  for (const char* digits : {"42", "007", "1e40", "", "-9223372036854775808"}) {
    StateDict sd;
    sd.Child("rng").Set("state", Value(BigInt{digits}));
    auto info = (*db)->Save(sd, {.step = 1});
    ASSERT_TRUE(info.status().IsInvalidArgument())
        << digits << ": " << info.status().ToString();
    EXPECT_NE(info.status().message().find("the int value of key 'rng.state'"),
              std::string::npos)
        << info.status().ToString();
  }
  EXPECT_TRUE((*db)->ListCheckpoints()->empty());
  StateDict sd;
  sd.Set("big", Value(BigInt{"-170141183460469231731687303715884105728"}));
  ASSERT_TRUE((*db)->Save(sd, {.step = 2}).ok());
  auto meta = (*db)->GetMetadata(CheckpointSelector::Latest());
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->values.at("big"),
            Value(BigInt{"-170141183460469231731687303715884105728"}));
}

// Keys, tags, user metadata and str values are text every reader decodes as
// UTF-8 (Python's str, the CLI's JSON): a save refuses any that is not,
// naming it, and commits nothing; UTF-8 beyond ASCII and a NUL are text.
TEST(DBTest, RefusesTextThatIsNotUtf8AndCommitsNothing) {
  testing::TempDir dir;
  auto db = DB::Open(Options(), dir.path());
  ASSERT_TRUE(db.ok());
  float x[4] = {1, 2, 3, 4};
  const std::string bad = "best\xff\xfe";
  struct Case {
    std::string what;
    StateDict state;
    SaveOptions options;
  };
  std::vector<Case> cases(5);
  for (Case& c : cases)
    c.state.Set("w", TensorView::Whole(x, DType::kFloat32, {4}));
  cases[0].what = "tag";
  cases[0].options.tag = bad;
  cases[1].what = "user metadata key";
  cases[1].options.user_metadata[bad] = "v";
  cases[2].what = "the user metadata value of 'note'";
  cases[2].options.user_metadata["note"] = bad;
  cases[3].what = "key";
  cases[3].state.Child("optim").Set(bad, Value(int64_t{1}));
  cases[4].what = "the str value of key 'name'";
  cases[4].state.Set("name", Value(bad));
  for (Case& c : cases) {
    c.options.step = 1;
    auto info = (*db)->Save(c.state, c.options);
    ASSERT_TRUE(info.status().IsInvalidArgument())
        << c.what << ": " << info.status().ToString();
    const std::string quoted =
        c.what == "key" ? "'optim.best\\xff\\xfe'" : "'best\\xff\\xfe'";
    EXPECT_EQ(info.status().message().rfind(
                  c.what + " is not UTF-8 text: " + quoted, 0),
              0u)
        << info.status().ToString();
  }
  auto listed = (*db)->ListCheckpoints();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());
  StateDict text;
  text.Set("caf\xc3\xa9", Value(std::string("a\0b", 3)));
  ASSERT_TRUE((*db)
                  ->Save(text, {.step = 2,
                                .tag = "\xf0\x9f\x98\x80",
                                .user_metadata = {{"k", "\xc3\xa9"}}})
                  .ok());
  auto meta = (*db)->GetMetadata(CheckpointSelector::Tag("\xf0\x9f\x98\x80"));
  ASSERT_TRUE(meta.ok()) << meta.status().ToString();
  EXPECT_EQ(std::get<std::string>(meta->values.at("caf\xc3\xa9")),
            std::string("a\0b", 3));
}

}  // namespace
}  // namespace ckptdb
