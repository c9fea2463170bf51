// Real CUDA round trips (ctest label gpu). Skipped, saying why, on machines
// without a usable CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "ckptdb/db.h"
#include "engine/device/device.h"
#include "tests/testing/group.h"
#include "tests/testing/ranks.h"

namespace ckptdb {
namespace {

using testing::GlobalTensor;
using testing::Part;
using testing::RunRanks;
using testing::SharedTempDir;

// A device copy of host bytes, freed on destruction.
struct DeviceBuffer {
  void* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t bytes) : n(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr, n == 0 ? 1 : n), cudaSuccess);
    EXPECT_EQ(cudaMemset(ptr, 0, n), cudaSuccess);
  }
  DeviceBuffer(const std::vector<uint8_t>& host) : DeviceBuffer(host.size()) {
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), n, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<uint8_t> ToHost() const {
    std::vector<uint8_t> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, n, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }
};

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device on this machine ("
                   << (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices")
                   << "): GPU tests skipped";
    }
    ASSERT_NE(engine::BuiltDeviceCopier(), nullptr);
  }
};

TensorView Cuda(void* p, DType t, Shape local, Shape global, Shape offset) {
  return TensorView::Shard(p, t, std::move(local), std::move(global),
                           std::move(offset), {DeviceType::kCUDA, 0});
}

// 2 ranks save device row shards; 3 ranks load device column shards, a cast
// target and a host target of the same tensor.
TEST_F(GpuTest, DeviceSaveAndReshardedLoadWithMixedTargets) {
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {96, 80}, 1);
  const GlobalTensor b(DType::kBFloat16, {80}, 2);
  Options options;
  options.max_chunk_bytes = 4096;
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = DB::Open(options, dir.path(), comm);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    auto [r0, r1] = Part(96, rank, 2);
    DeviceBuffer ws(w.Slice({r0, 0}, {r1 - r0, 80}));
    DeviceBuffer bs(b.bytes);
    StateDict sd;
    sd.Set("w", Cuda(ws.ptr, w.dtype, {r1 - r0, 80}, w.shape, {r0, 0}));
    sd.Set("b", Cuda(bs.ptr, b.dtype, {80}, b.shape, {0}));  // replicated
    auto info = (*db)->Save(sd, {.step = 7});
    ASSERT_TRUE(info.ok()) << info.status().ToString();
  });
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = DB::Open(options, dir.path(), comm);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    auto [c0, c1] = Part(80, rank, 3);
    DeviceBuffer wt(static_cast<size_t>(96 * (c1 - c0)) * 4);
    DeviceBuffer bt(80 * 4);  // float32 from bfloat16
    std::vector<uint8_t> host_w(static_cast<size_t>(96 * 80) * 4);
    StateDict sd;
    sd.Set("w", Cuda(wt.ptr, w.dtype, {96, c1 - c0}, w.shape, {0, c0}));
    sd.Set("b", Cuda(bt.ptr, DType::kFloat32, {80}, b.shape, {0}));
    sd.Child("host").Set(
        "w", TensorView::Whole(host_w.data(), DType::kFloat32, {96, 80}));
    auto result = (*db)->Load(sd, CheckpointSelector::Step(7),
                              {.strict = false, .cast = true});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(wt.ToHost(), w.Slice({0, c0}, {96, c1 - c0}));
    EXPECT_EQ(bt.ToHost(), b.As(DType::kFloat32).bytes);
  });
}

// A 3-D device target receiving an inner box: the strided 2-D copies.
TEST_F(GpuTest, StridedDeviceTargets) {
  SharedTempDir dir;
  const GlobalTensor cube(DType::kInt16, {5, 12, 9}, 3);
  RunRanks(1, [&](int, std::shared_ptr<Communicator> comm) {
    auto db = DB::Open(Options(), dir.path(), comm);
    ASSERT_TRUE(db.ok());
    DeviceBuffer all(cube.bytes);
    StateDict sd;
    sd.Set("cube",
           Cuda(all.ptr, cube.dtype, cube.shape, cube.shape, {0, 0, 0}));
    ASSERT_TRUE((*db)->Save(sd, {}).ok());
    DeviceBuffer part(static_cast<size_t>(3 * 7 * 4) * 2);
    StateDict target;
    target.Set("cube",
               Cuda(part.ptr, cube.dtype, {3, 7, 4}, cube.shape, {1, 2, 5}));
    auto result = (*db)->Load(target, CheckpointSelector::Latest(), {});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(part.ToHost(), cube.Slice({1, 2, 5}, {3, 7, 4}));
  });
}

// Transposed and sliced device views of every element size, and a strided
// device flat range: saved through the strided device-to-host 2-D copies,
// loaded into strided device targets (2-D copies into them).
TEST_F(GpuTest, TransposedSlicedAndFlatDeviceViews) {
  SharedTempDir dir;
  for (DType dtype :
       {DType::kUInt8, DType::kFloat16, DType::kFloat32, DType::kFloat64}) {
    const GlobalTensor p(dtype, {6, 10}, 4);
    const size_t elem = DTypeSize(dtype);
    RunRanks(1, [&](int, std::shared_ptr<Communicator> comm) {
      Options options;
      options.max_chunk_bytes = 40;
      auto db = DB::Open(options, dir.path(), comm);
      ASSERT_TRUE(db.ok());
      DeviceBuffer src(p.bytes);
      char* base = static_cast<char*>(src.ptr);
      StateDict sd;
      sd.Set("t",
             Cuda(base, dtype, {10, 6}, {10, 6}, {0, 0}).WithStrides({1, 10}));
      sd.Set("s", Cuda(base + 10 * elem, dtype, {4, 5}, {4, 5}, {0, 0})
                      .WithStrides({10, 2}));
      TensorView flat = TensorView::FlatRange(base, dtype, 30, {5, 6}, 0,
                                              {DeviceType::kCUDA, 0});
      sd.Set("f", flat.WithStrides({2}));
      ASSERT_TRUE((*db)->Save(sd, {}).ok());
      DeviceBuffer q1(p.bytes.size()), q2(p.bytes.size()), q3(p.bytes.size());
      StateDict target;
      target.Set(
          "t",
          Cuda(q1.ptr, dtype, {10, 6}, {10, 6}, {0, 0}).WithStrides({1, 10}));
      target.Set("s", Cuda(static_cast<char*>(q2.ptr) + 10 * elem, dtype,
                           {4, 5}, {4, 5}, {0, 0})
                          .WithStrides({10, 2}));
      TensorView flat_target = TensorView::FlatRange(q3.ptr, dtype, 30, {5, 6},
                                                     0, {DeviceType::kCUDA, 0});
      target.Set("f", flat_target.WithStrides({2}));
      auto result = (*db)->Load(target, CheckpointSelector::Latest(), {});
      ASSERT_TRUE(result.ok()) << result.status().ToString();
      EXPECT_EQ(q1.ToHost(), p.bytes);
      std::vector<uint8_t> sliced(p.bytes.size(), 0), every_other = sliced;
      for (size_t i = 0; i < 60; ++i) {
        const size_t row = i / 10, col = i % 10;
        if (row >= 1 && row < 5 && col % 2 == 0)
          std::copy_n(&p.bytes[i * elem], elem, &sliced[i * elem]);
        if (i % 2 == 0)
          std::copy_n(&p.bytes[i * elem], elem, &every_other[i * elem]);
      }
      EXPECT_EQ(q2.ToHost(), sliced) << DTypeName(dtype);
      EXPECT_EQ(q3.ToHost(), every_other) << DTypeName(dtype);
      ASSERT_TRUE((*db)->Delete(CheckpointSelector::Latest()).ok());
    });
  }
}

// Ranks on GPUs of their own move slices for each other's device targets
// with NCCL: strided column targets (staged, placed by 2-D copies), a cast
// target, and a replicated tensor every rank loads whole (broadcast from 3
// ranks on). With one GPU, two ranks share it: NCCL refuses that, and every
// rank falls back to host transfers, still bit-exact.
TEST_F(GpuTest, SlicesForOtherRanksMoveByNcclOrFallBack) {
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  const int ranks = std::max(2, std::min(gpus, 4));
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {64, 96}, 4);
  const GlobalTensor b(DType::kBFloat16, {96}, 5);
  Options options;
  options.max_chunk_bytes = 2048;
  RunRanks(1, [&](int, std::shared_ptr<Communicator> comm) {
    auto db = DB::Open(options, dir.path(), comm);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    std::vector<uint8_t> wh = w.bytes, bh = b.bytes;
    StateDict sd;
    sd.Set("w", TensorView::Whole(wh.data(), w.dtype, w.shape));
    sd.Set("b", TensorView::Whole(bh.data(), b.dtype, b.shape));
    ASSERT_TRUE((*db)->Save(sd, {}).ok());
  });
  RunRanks(ranks, [&](int rank, std::shared_ptr<Communicator> comm) {
    const int gpu = rank % gpus;
    ASSERT_EQ(cudaSetDevice(gpu), cudaSuccess);
    auto db = DB::Open(options, dir.path(), comm);
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    auto [c0, c1] = Part(96, rank, ranks);
    DeviceBuffer wt(static_cast<size_t>(64 * (c1 - c0)) * 4);
    DeviceBuffer bt(96 * 4);  // float32 from bfloat16
    StateDict sd;
    sd.Set("w", TensorView::Shard(wt.ptr, w.dtype, {64, c1 - c0}, w.shape,
                                  {0, c0}, {DeviceType::kCUDA, gpu}));
    sd.Set("b", TensorView::Shard(bt.ptr, DType::kFloat32, {96}, b.shape, {0},
                                  {DeviceType::kCUDA, gpu}));
    auto result = (*db)->Load(sd, CheckpointSelector::Latest(), {.cast = true});
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(wt.ToHost(), w.Slice({0, c0}, {64, c1 - c0}));
    EXPECT_EQ(bt.ToHost(), b.As(DType::kFloat32).bytes);
    const uint64_t device_sent =
        testing::SumOver(*comm, result->stats.device_bytes_sent);
    if (gpus >= 2) {
      EXPECT_GT(device_sent, 0u);
    } else {
      EXPECT_EQ(device_sent, 0u);
    }
  });
}

}  // namespace
}  // namespace ckptdb
