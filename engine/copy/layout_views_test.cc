// Save and Load with strided views (transposed, sliced) and flat-range views,
// in one process; on the host and, through the host stand-in for a GPU, on a
// "device". Multi-rank cases: tests/multirank_layout_scenarios.cc.
#include <gtest/gtest.h>

#include <cstring>

#include "ckptdb/db.h"
#include "tests/testing/host_device.h"
#include "tests/testing/random_bytes.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb {
namespace {

using testing::RandomBytes;
using testing::TempDir;

// A 6 x 10 parent array `p` and two strided views of it: its transpose (10 x
// 6, strides {1, 10}) and p[1:5, ::2] (4 x 5, strides {10, 2}).
struct Views {
  static constexpr int64_t kRows = 6, kCols = 10;
  DType dtype;
  Device device;
  size_t elem() const { return DTypeSize(dtype); }

  TensorView Transposed(uint8_t* p) const {
    return TensorView::Whole(p, dtype, {kCols, kRows}, device)
        .WithStrides({1, kCols});
  }
  TensorView Sliced(uint8_t* p) const {
    return TensorView::Whole(p + kCols * elem(), dtype, {4, 5}, device)
        .WithStrides({kCols, 2});
  }
  // Element (i, j) of the transposed and of the sliced view in the parent.
  static size_t TransposedAt(int64_t i, int64_t j) { return j * kCols + i; }
  static size_t SlicedAt(int64_t i, int64_t j) {
    return (1 + i) * kCols + 2 * j;
  }
};

// Several chunks per tensor; device tensors on `device` when given.
std::unique_ptr<DB> OpenSmallChunks(const std::string& path,
                                    testing::HostAsDevice* device = nullptr) {
  Options options;
  options.max_chunk_bytes = 24;
  if (device != nullptr) {
    return testing::OpenWithDevices(path, nullptr, options,
                                    testing::HostSeams(*device));
  }
  auto db = DB::Open(options, path);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(db).value() : nullptr;
}

class StridedViewsTest
    : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

// Saved from strided views, loaded into dense targets and into strided views
// of another parent: the values land in place, the parent's other elements
// keep their bytes.
TEST_P(StridedViewsTest, RoundTripThroughStridedSourcesAndTargets) {
  const auto [dtype, on_device] = GetParam();
  testing::HostAsDevice device;
  const Views v{dtype, on_device ? Device{DeviceType::kCUDA, 0} : Device{}};
  const size_t elem = v.elem();
  const size_t parent_bytes = Views::kRows * Views::kCols * elem;
  std::vector<uint8_t> p = RandomBytes(parent_bytes, 3);
  TempDir dir;
  auto db = OpenSmallChunks(dir.path(), on_device ? &device : nullptr);
  StateDict sd;
  sd.Set("t", v.Transposed(p.data())).Set("s", v.Sliced(p.data()));
  ASSERT_TRUE(db->Save(sd, {.step = 1}).ok());

  // Dense targets: the views' values in row-major order.
  std::vector<uint8_t> t(parent_bytes), s(20 * elem);
  StateDict dense;
  dense.Set("t", TensorView::Whole(t.data(), dtype, {10, 6}, v.device))
      .Set("s", TensorView::Whole(s.data(), dtype, {4, 5}, v.device));
  ASSERT_TRUE(db->Load(dense, CheckpointSelector::Latest(), {}).ok());
  for (int64_t i = 0; i < 10; ++i) {
    for (int64_t j = 0; j < 6; ++j) {
      ASSERT_EQ(0, std::memcmp(&t[(i * 6 + j) * elem],
                               &p[Views::TransposedAt(i, j) * elem], elem));
    }
  }
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      ASSERT_EQ(0, std::memcmp(&s[(i * 5 + j) * elem],
                               &p[Views::SlicedAt(i, j) * elem], elem));
    }
  }

  // Strided targets in two fresh parents.
  std::vector<uint8_t> q1(parent_bytes, 0xA5), q2(parent_bytes, 0xA5);
  StateDict strided;
  strided.Set("t", v.Transposed(q1.data())).Set("s", v.Sliced(q2.data()));
  ASSERT_TRUE(db->Load(strided, CheckpointSelector::Latest(), {}).ok());
  EXPECT_EQ(q1, p);  // the transpose covers the whole parent
  std::vector<uint8_t> want(parent_bytes, 0xA5);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      const size_t at = Views::SlicedAt(i, j) * elem;
      std::memcpy(&want[at], &p[at], elem);
    }
  }
  EXPECT_EQ(q2, want);
}

INSTANTIATE_TEST_SUITE_P(
    EveryElementSize, StridedViewsTest,
    ::testing::Combine(::testing::Values(DType::kUInt8, DType::kFloat16,
                                         DType::kFloat32, DType::kFloat64),
                       ::testing::Bool()));

// A tensor saved from one flat range (the whole flattening) loads into a flat
// range of part of it, and into a strided flat range (every other element of
// a buffer).
TEST(FlatRangeViewsTest, SaveAndLoadFlatRanges) {
  const Shape shape{5, 7};
  std::vector<float> values(35);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * i;
  TempDir dir;
  auto db = OpenSmallChunks(dir.path());
  StateDict sd;
  sd.Set("w",
         TensorView::FlatRange(values.data(), DType::kFloat32, 35, shape, 0));
  ASSERT_TRUE(db->Save(sd, {.step = 1}).ok());
  auto meta = db->GetMetadata(CheckpointSelector::Latest());
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(meta->tensors.at("w").global_shape, shape);

  std::vector<float> part(21, -1), every_other(2 * 21, -1);
  StateDict targets;
  targets.Set(
      "w", TensorView::FlatRange(part.data(), DType::kFloat32, 21, shape, 9));
  ASSERT_TRUE(db->Load(targets, CheckpointSelector::Latest(), {}).ok());
  for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], 0.5f * (9 + i));
  targets.Set("w", TensorView::FlatRange(every_other.data(), DType::kFloat32,
                                         21, shape, 9)
                       .WithStrides({2}));
  ASSERT_TRUE(db->Load(targets, CheckpointSelector::Latest(), {}).ok());
  for (size_t i = 0; i < every_other.size(); ++i) {
    EXPECT_EQ(every_other[i], i % 2 ? -1.f : 0.5f * (9 + i / 2)) << i;
  }
}

// Bad views are InvalidArgument naming the key, before anything is written.
TEST(FlatRangeViewsTest, BadViewsAreRefusedNamingTheKey) {
  TempDir dir;
  auto db = OpenSmallChunks(dir.path());
  std::vector<float> buf(64);
  auto save = [&](TensorView view) {
    StateDict sd;
    sd.Set("bad", view);
    return db->Save(sd, {}).status();
  };
  const Status outside =
      save(TensorView::FlatRange(buf.data(), DType::kFloat32, 10, {3, 3}, 0));
  EXPECT_TRUE(outside.IsInvalidArgument());
  EXPECT_NE(outside.message().find("'bad'"), std::string::npos);
  EXPECT_NE(outside.message().find("[0, 10)"), std::string::npos)
      << outside.ToString();
  const Status negative =
      save(TensorView::Whole(buf.data(), DType::kFloat32, {4, 4})
               .WithStrides({-4, 1}));
  EXPECT_TRUE(negative.IsInvalidArgument());
  EXPECT_NE(negative.message().find("negative"), std::string::npos);
  EXPECT_TRUE(save(TensorView::Whole(buf.data(), DType::kFloat32, {4, 4})
                       .WithStrides({4}))
                  .IsInvalidArgument());
  TensorView with_offset =
      TensorView::FlatRange(buf.data(), DType::kFloat32, 4, {3, 3}, 0);
  with_offset.global_offset = {0, 0};
  EXPECT_TRUE(save(with_offset).IsInvalidArgument());
  auto listed = db->ListCheckpoints();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());

  // A broadcast view (stride 0) saves, but is no load target.
  StateDict sd;
  sd.Set("b", TensorView::Whole(buf.data(), DType::kFloat32, {4, 4})
                  .WithStrides({0, 1}));
  ASSERT_TRUE(db->Save(sd, {}).ok());
  const Status broadcast =
      db->Load(sd, CheckpointSelector::Latest(), {}).status();
  EXPECT_TRUE(broadcast.IsInvalidArgument());
  EXPECT_NE(broadcast.message().find("'b'"), std::string::npos);
}

}  // namespace
}  // namespace ckptdb
