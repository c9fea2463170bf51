#include "engine/device/device.h"

#include <gtest/gtest.h>

#include <random>

#include "ckptdb/db.h"
#include "tests/testing/host_device.h"
#include "tests/testing/temp_dir.h"

namespace ckptdb::engine {
namespace {

// The 2-D copies of a box, carried out on host memory, fill exactly the box
// CopyBox fills.
TEST(BoxAsCopies2D, MatchesCopyBoxOnRandomBoxes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const size_t ndim = 1 + rng() % 4;
    const size_t elem = size_t{1} << (rng() % 4);
    Shape shape(ndim), offset(ndim), lengths(ndim);
    for (size_t d = 0; d < ndim; ++d) {
      shape[d] = 1 + rng() % 6;
      offset[d] = rng() % shape[d];
      lengths[d] = 1 + rng() % (shape[d] - offset[d]);
      if (rng() % 3 == 0) {  // whole dimensions merge
        offset[d] = 0;
        lengths[d] = shape[d];
      }
    }
    const size_t n = static_cast<size_t>(NumElements(lengths)) * elem;
    std::vector<uint8_t> packed(n);
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    const size_t total = static_cast<size_t>(NumElements(shape)) * elem;
    std::vector<uint8_t> want(total, 0), got(total, 0);
    const DType dtype = elem == 1   ? DType::kUInt8
                        : elem == 2 ? DType::kInt16
                        : elem == 4 ? DType::kInt32
                                    : DType::kInt64;
    const Shape zero(ndim, 0);
    CopyBox({packed.data(), lengths, zero}, dtype, {want.data(), shape, offset},
            dtype, lengths);
    const uint8_t* from = packed.data();
    for (const Copy2D& c : BoxAsCopies2D(shape, offset, lengths, elem)) {
      ASSERT_GE(c.pitch, c.width);
      for (size_t r = 0; r < c.rows; ++r) {
        ASSERT_LE(c.offset + r * c.pitch + c.width, total);
        std::memcpy(got.data() + c.offset + r * c.pitch, from, c.width);
        from += c.width;
      }
    }
    EXPECT_EQ(static_cast<size_t>(from - packed.data()), n);
    ASSERT_EQ(got, want) << "trial " << trial << " shape "
                         << ShapeToString(shape) << " offset "
                         << ShapeToString(offset) << " lengths "
                         << ShapeToString(lengths);
  }
}

// Into and out of a transposed, column-sliced array: the 2-D copies (and the
// device stand-in's StartBoxToHost) place exactly what CopyBox places.
TEST(BoxAsCopies2D, StridedArrays) {
  testing::HostAsDevice device;
  std::mt19937 rng(5);
  for (size_t elem : {size_t{1}, size_t{2}, size_t{4}, size_t{8}}) {
    const DType dtype = elem == 1   ? DType::kUInt8
                        : elem == 2 ? DType::kInt16
                        : elem == 4 ? DType::kInt32
                                    : DType::kInt64;
    // A 6x10 parent; the view is parent[:, ::2] transposed: 5x6, strides
    // {2, 10}.
    const Shape shape{5, 6}, offset{1, 2}, lengths{3, 4}, zero{0, 0};
    const std::vector<int64_t> strides = {2, 10};
    std::vector<uint8_t> packed(12 * elem), want(60 * elem, 0), got = want;
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    CopyBox({packed.data(), lengths, zero}, dtype,
            {want.data(), shape, offset, strides}, dtype, lengths);
    ASSERT_TRUE(device
                    .BoxToDevice({DeviceType::kCUDA, 0}, packed.data(),
                                 {got.data(), shape, offset, strides}, elem,
                                 lengths)
                    .ok());
    EXPECT_EQ(got, want) << elem;
    std::vector<uint8_t> back(packed.size(), 0);
    ASSERT_TRUE(device
                    .StartBoxToHost({DeviceType::kCUDA, 0},
                                    {got.data(), shape, offset, strides},
                                    back.data(), elem, lengths, 0)
                    .ok());
    EXPECT_EQ(back, packed) << elem;
  }
  // The innermost stride is 2: runs of one element, 4 rows of each copy.
  const auto copies =
      BoxAsCopies2D({5, 6}, {1, 2}, {3, 4}, 4, std::vector<int64_t>{2, 10});
  ASSERT_EQ(copies.size(), 3u);
  EXPECT_EQ(copies[0].width, 4u);
  EXPECT_EQ(copies[0].pitch, 40u);
  EXPECT_EQ(copies[0].rows, 4u);
  EXPECT_EQ(copies[0].offset, (1 * 2 + 2 * 10) * 4u);
}

TEST(BoxAsCopies2D, WholeTrailingDimensionsMergeIntoOneCopy) {
  // Rows 2..5 of a [8, 16, 4] array: one contiguous run.
  auto copies = BoxAsCopies2D({8, 16, 4}, {2, 0, 0}, {4, 16, 4}, 4);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].offset, 2u * 16 * 4 * 4);
  EXPECT_EQ(copies[0].width, 4u * 16 * 4 * 4);
  EXPECT_EQ(copies[0].rows, 1u);
  // A column block of a matrix: one 2-D copy with the row pitch.
  copies = BoxAsCopies2D({10, 12}, {1, 4}, {5, 3}, 2);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].pitch, 24u);
  EXPECT_EQ(copies[0].width, 6u);
  EXPECT_EQ(copies[0].rows, 5u);
  // A scalar.
  copies = BoxAsCopies2D({}, {}, {}, 8);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].width, 8u);
}

TEST(PlaceBox, DeviceTargetsGoThroughStagingAndConvert) {
  testing::HostAsDevice device;
  std::vector<float> src = {1, 2, 3, 4, 5, 6};  // [2, 3]
  std::vector<double> dst(12, 0);               // [3, 4]
  TensorView target = TensorView::Whole(dst.data(), DType::kFloat64, {3, 4},
                                        {DeviceType::kCUDA, 0});
  StagingBuffer staging;
  const Shape shape{2, 3}, zero{0, 0}, at{1, 1};
  ASSERT_TRUE(PlaceBox({src.data(), shape, zero}, DType::kFloat32, target, at,
                       shape, &device, &staging)
                  .ok());
  EXPECT_EQ(dst, (std::vector<double>{0, 0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6}));
  EXPECT_EQ(device.to_device_bytes.load(), 6 * sizeof(double));
  EXPECT_GE(staging.size(), 6 * sizeof(double));
}

TEST(PlaceBox, HostTargetsNeverTouchTheCopier) {
  testing::HostAsDevice device;
  std::vector<int32_t> src = {1, 2}, dst(2, 0);
  TensorView target = TensorView::Whole(dst.data(), DType::kInt32, {2});
  StagingBuffer staging;
  const Shape len{2}, zero{0};
  ASSERT_TRUE(PlaceBox({src.data(), len, zero}, DType::kInt32, target, zero,
                       len, &device, &staging)
                  .ok());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(device.to_device_bytes.load(), 0u);
  EXPECT_EQ(staging.size(), 0u);
}

// The caller's producer may still be writing a device tensor: save and load
// wait for the work queued on its device first, and a device that cannot be
// used is InvalidArgument naming the tensor.
TEST(DeviceTensors, SaveAndLoadWaitForTheProducersWork) {
  testing::HostAsDevice device;
  testing::TempDir dir;
  auto db = testing::OpenWithDevices(dir.path(), nullptr, Options(),
                                     testing::HostSeams(device));
  ASSERT_NE(db, nullptr);
  std::vector<float> w = {1, 2, 3, 4};
  const Device cuda{DeviceType::kCUDA, 0};
  StateDict sd;
  sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {4}, cuda));
  ASSERT_TRUE(db->Save(sd, {.step = 1}).ok());
  EXPECT_EQ(device.synchronized.load(), 1u);
  std::vector<float> out(4, 0);
  StateDict target;
  target.Set("w", TensorView::Whole(out.data(), DType::kFloat32, {4}, cuda));
  ASSERT_TRUE(db->Load(target, CheckpointSelector::Latest(), {}).ok());
  EXPECT_EQ(device.synchronized.load(), 2u);
  EXPECT_EQ(out, w);
  device.fail_synchronize = true;
  auto saved = db->Save(sd, {.step = 2});
  ASSERT_TRUE(saved.status().IsInvalidArgument());
  EXPECT_NE(saved.status().message().find("tensor 'w'"), std::string::npos)
      << saved.status().message();
  EXPECT_TRUE(db->Load(target, CheckpointSelector::Latest(), {})
                  .status()
                  .IsInvalidArgument());
  EXPECT_EQ(db->ListCheckpoints()->size(), 1u);
}

// The copier is the DB's own: beside a DB on the host stand-in, a DB opened
// with the build's seams on a machine without a device refuses device tensors,
// naming the tensor, and its store stays empty.
TEST(DeviceTensors, EachDBUsesTheCopierItWasOpenedWith) {
  if (BuiltDeviceCopier() != nullptr)
    GTEST_SKIP() << "this machine has a CUDA device";
  testing::HostAsDevice device;
  testing::TempDir with_device, without;
  auto on_device = testing::OpenWithDevices(
      with_device.path(), nullptr, Options(), testing::HostSeams(device));
  ASSERT_NE(on_device, nullptr);
  auto plain = DB::Open(Options(), without.path());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  std::vector<float> w = {1, 2};
  StateDict sd;
  sd.Set("w", TensorView::Whole(w.data(), DType::kFloat32, {2},
                                {DeviceType::kCUDA, 0}));
  EXPECT_TRUE(on_device->Save(sd, {}).ok());
  EXPECT_EQ(device.to_host_bytes.load(), sizeof(float) * 2);
  auto refused = (*plain)->Save(sd, {});
  ASSERT_TRUE(refused.status().IsInvalidArgument());
  EXPECT_NE(refused.status().message().find("tensor 'w'"), std::string::npos)
      << refused.status().message();
  EXPECT_TRUE((*plain)->ListCheckpoints()->empty());
  EXPECT_EQ(device.to_host_bytes.load(), sizeof(float) * 2);
}

// A device target with no copier to fill it is InvalidArgument.
TEST(PlaceBox, DeviceTargetsWithoutACopierAreRefused) {
  std::vector<float> src = {1}, dst = {0};
  TensorView target = TensorView::Whole(dst.data(), DType::kFloat32, {1},
                                        {DeviceType::kCUDA, 0});
  StagingBuffer staging;
  const Shape len{1}, zero{0};
  EXPECT_TRUE(PlaceBox({src.data(), len, zero}, DType::kFloat32, target, zero,
                       len, nullptr, &staging)
                  .IsInvalidArgument());
  EXPECT_EQ(dst[0], 0);
}

}  // namespace
}  // namespace ckptdb::engine
