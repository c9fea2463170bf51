// Flat-range shards and strided views across ranks: saved from flat ranges on
// 3 ranks and loaded into row shards on 2, the reverse, flat ranges mixed with
// Shards, replicas of flat ranges, gaps; strided views of every element size
// saved on 2 ranks and loaded into strided column shards; tied targets. Built
// twice, like multirank_scenarios.cc (threads and mpirun).
#include <gtest/gtest.h>

#include <cstring>

#include "ckptdb/db.h"
#include "tests/testing/group.h"
#include "tests/testing/ranks.h"

namespace ckptdb {
namespace {

using testing::GlobalTensor;
using testing::MaxRanks;
using testing::OpenRank;
using testing::OwnedShard;
using testing::Part;
using testing::RunRanks;
using testing::ShardOf;
using testing::SharedTempDir;
using testing::SumOver;
using testing::TargetOf;

// Elements [begin, end) of the flattening of `g`.
std::vector<uint8_t> FlatBytes(const GlobalTensor& g, int64_t begin,
                               int64_t end) {
  const size_t elem = DTypeSize(g.dtype);
  return {g.bytes.begin() + begin * elem, g.bytes.begin() + end * elem};
}

std::map<std::string, GlobalTensor> Tensors() {
  return {{"a", GlobalTensor(DType::kFloat32, {13, 11}, 1)},
          {"b", GlobalTensor(DType::kInt8, {7, 5, 3}, 2)},
          {"c", GlobalTensor(DType::kFloat64, {10}, 3)},
          {"d", GlobalTensor(DType::kBFloat16, {}, 4)}};
}

// The rows of `g` that rank `rank` of `ranks` holds, as (offset, local
// shape); a 0-d tensor is held whole.
std::pair<Shape, Shape> RowsOf(const GlobalTensor& g, int rank, int ranks) {
  Shape offset(g.shape.size(), 0), local = g.shape;
  if (!g.shape.empty()) {
    auto [b, e] = Part(g.shape[0], rank, ranks);
    offset[0] = b;
    local[0] = e - b;
  }
  return {offset, local};
}

Options SmallChunks() {
  Options options;
  options.max_chunk_bytes = 64;
  return options;
}

// Saves `tensors` from flat ranges on `ranks` ranks: rank r holds part r of
// each flattening ("a" on rank 0 as the Shard of its whole rows instead).
void SaveFlat(const std::string& path,
              const std::map<std::string, GlobalTensor>& tensors, int ranks) {
  RunRanks(ranks, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(path, comm, SmallChunks());
    std::vector<std::vector<uint8_t>> buffers;
    buffers.reserve(tensors.size());
    StateDict sd;
    for (const auto& [key, g] : tensors) {
      const int64_t n = NumElements(g.shape);
      auto [b, e] = Part(n, rank, ranks);
      if (key == "a" && ranks == 3) {  // rank 0: rows [0, 4) as a Shard
        if (rank == 0) e = 4 * g.shape[1];
        if (rank == 1) b = 4 * g.shape[1];
      }
      buffers.push_back(FlatBytes(g, b, e));
      if (key == "a" && ranks == 3 && rank == 0) {
        sd.Set(key, TensorView::Shard(buffers.back().data(), g.dtype,
                                      {e / g.shape[1], g.shape[1]}, g.shape,
                                      {0, 0}));
      } else {
        sd.Set(key, TensorView::FlatRange(buffers.back().data(), g.dtype, e - b,
                                          g.shape, b));
      }
    }
    auto info = db->Save(sd, {.step = 1});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
  });
}

// Saves `tensors` as step `step` from row shards on `ranks` ranks (RowsOf).
void SaveRows(const std::string& path,
              const std::map<std::string, GlobalTensor>& tensors, int ranks,
              int64_t step) {
  RunRanks(ranks, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(path, comm, SmallChunks());
    std::vector<OwnedShard> shards;
    shards.reserve(tensors.size());
    StateDict sd;
    for (const auto& [key, g] : tensors) {
      const auto [offset, local] = RowsOf(g, rank, ranks);
      shards.push_back(ShardOf(g, offset, local));
      sd.Set(key, shards.back().View(g));
    }
    auto info = db->Save(sd, {.step = step});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
  });
}

TEST(FlatRangeRanksTest, SavedFromFlatRangesOnThreeLoadsIntoRowsOnTwo) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const auto tensors = Tensors();
  SaveFlat(dir.path(), tensors, 3);
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, SmallChunks());
    std::vector<OwnedShard> targets;
    targets.reserve(tensors.size());
    StateDict sd;
    for (const auto& [key, g] : tensors) {
      const auto [offset, local] = RowsOf(g, rank, 2);
      targets.push_back(TargetOf(g, offset, local));
      sd.Set(key, targets.back().View(g));
    }
    auto result = db->Load(sd, CheckpointSelector::Latest(), {});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    size_t i = 0;
    uint64_t stored = 0;
    for (const auto& [key, g] : tensors) {
      EXPECT_EQ(targets[i].bytes, g.Slice(targets[i].offset, targets[i].local))
          << key << " on rank " << rank;
      stored += g.bytes.size();
      ++i;
    }
    // Every stored byte is read once, by one rank.
    EXPECT_EQ(SumOver(*comm, result.ok() ? result->stats.bytes_read : 0),
              stored);
  });
}

TEST(FlatRangeRanksTest, SavedFromRowsOnTwoLoadsIntoFlatRangesOnThree) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const auto tensors = Tensors();
  SaveRows(dir.path(), tensors, 2, 2);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, SmallChunks());
    std::vector<std::vector<uint8_t>> buffers;
    buffers.reserve(tensors.size());
    StateDict sd;
    for (const auto& [key, g] : tensors) {
      auto [b, e] = Part(NumElements(g.shape), rank, 3);
      // Rank 1 lands its ranges in every other element of its buffer.
      const int64_t step = rank == 1 ? 2 : 1;
      buffers.emplace_back((e - b) * step * DTypeSize(g.dtype), 0);
      TensorView view = TensorView::FlatRange(buffers.back().data(), g.dtype,
                                              e - b, g.shape, b);
      sd.Set(key, step == 1 ? view : view.WithStrides({step}));
    }
    auto result = db->Load(sd, CheckpointSelector::Step(2), {});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    size_t i = 0;
    for (const auto& [key, g] : tensors) {
      auto [b, e] = Part(NumElements(g.shape), rank, 3);
      const size_t elem = DTypeSize(g.dtype);
      std::vector<uint8_t> got;
      for (int64_t k = 0; k < e - b; ++k) {
        const uint8_t* at = &buffers[i][k * (rank == 1 ? 2 : 1) * elem];
        got.insert(got.end(), at, at + elem);
      }
      EXPECT_EQ(got, FlatBytes(g, b, e)) << key << " on rank " << rank;
      ++i;
    }
  });
}

TEST(FlatRangeRanksTest, ReplicasStoredOnceGapsAndOverlapsRefused) {
  if (MaxRanks() < 2) GTEST_SKIP() << "needs 2 ranks";
  SharedTempDir dir;
  const GlobalTensor g(DType::kFloat32, {6, 5}, 9);
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, SmallChunks());
    auto save = [&](int64_t begin, int64_t end) {
      std::vector<uint8_t> bytes = FlatBytes(g, begin, end);
      StateDict sd;
      sd.Set("w", TensorView::FlatRange(bytes.data(), g.dtype, end - begin,
                                        g.shape, begin));
      return db->Save(sd, {});
    };
    // Element 17 is held by no rank: a gap, refused on every rank naming the
    // key.
    const Status gap = (rank == 0 ? save(0, 17) : save(18, 30)).status();
    EXPECT_TRUE(gap.IsInvalidArgument()) << gap.ToString();
    EXPECT_NE(gap.message().find("'w'"), std::string::npos) << gap.ToString();
    // [0, 20) and [10, 30) overlap in boxes that are not identical.
    const Status overlap = (rank == 0 ? save(0, 20) : save(10, 30)).status();
    EXPECT_TRUE(overlap.IsInvalidArgument()) << overlap.ToString();
    // The same range on both ranks is a replica: stored once.
    auto info = save(0, 30);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->nbytes, g.bytes.size());
  });
}

// One array under three keys (tied weights), beside a key of its own, receives
// the bytes of the key that sorts last on every rank, whose sources are saved
// in many chunks by every rank and so reach each target from several readers;
// the other keys' chunks are not read.
TEST(TiedTargetRanksTest, TheKeyThatSortsLastFillsTheArrayOnEveryRank) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const std::map<std::string, GlobalTensor> tensors = {
      {"bias", GlobalTensor(DType::kFloat32, {24, 16}, 4)},
      {"emb", GlobalTensor(DType::kFloat32, {24, 16}, 1)},
      {"head", GlobalTensor(DType::kFloat32, {24, 16}, 2)},
      {"proj", GlobalTensor(DType::kFloat32, {24, 16}, 3)}};
  const GlobalTensor& last = tensors.at("proj");
  SaveRows(dir.path(), tensors, 3, 1);
  for (int ranks : {1, 3}) {
    RunRanks(ranks, [&](int rank, std::shared_ptr<Communicator> comm) {
      auto db = OpenRank(dir.path(), comm, SmallChunks());
      // Columns: every rank's target needs bytes every saving rank wrote.
      auto [begin, end] = Part(16, rank, ranks);
      OwnedShard tied = TargetOf(last, {0, begin}, {24, end - begin});
      const GlobalTensor& bias = tensors.at("bias");
      OwnedShard own = TargetOf(bias, {0, begin}, {24, end - begin});
      StateDict sd;
      for (const auto& [key, g] : tensors)
        sd.Set(key, key == "bias" ? own.View(g) : tied.View(g));
      auto result = db->Load(sd, CheckpointSelector::Latest(), {});
      ASSERT_TRUE(result.ok()) << result.status().ToString();
      EXPECT_EQ(tied.bytes, last.Slice(tied.offset, tied.local))
          << "rank " << rank << " of " << ranks;
      EXPECT_EQ(own.bytes, bias.Slice(own.offset, own.local))
          << "rank " << rank << " of " << ranks;
      EXPECT_EQ(SumOver(*comm, result->stats.bytes_read),
                last.bytes.size() + bias.bytes.size());
    });
  }
}

// Strided views (a transposed buffer on the save side, a column slice of a
// wider buffer on the load side) of every element size across 2 ranks.
TEST(StridedViewRanksTest, TransposedRowsLoadIntoSlicedColumns) {
  if (MaxRanks() < 2) GTEST_SKIP() << "needs 2 ranks";
  SharedTempDir dir;
  const std::map<std::string, GlobalTensor> tensors = {
      {"u8", GlobalTensor(DType::kUInt8, {8, 6}, 1)},
      {"f16", GlobalTensor(DType::kFloat16, {8, 6}, 2)},
      {"f32", GlobalTensor(DType::kFloat32, {8, 6}, 3)},
      {"f64", GlobalTensor(DType::kFloat64, {8, 6}, 4)}};
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, SmallChunks());
    auto [rb, re] = Part(8, rank, 2);
    const int64_t rows = re - rb;
    std::vector<std::vector<uint8_t>> buffers;
    buffers.reserve(tensors.size());
    StateDict sd;
    for (const auto& [key, g] : tensors) {
      // Rows [rb, re) held column-major: the transpose of a 6 x rows array.
      const size_t elem = DTypeSize(g.dtype);
      std::vector<uint8_t> cols(rows * 6 * elem);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < 6; ++j) {
          std::memcpy(&cols[(j * rows + i) * elem],
                      &g.bytes[((rb + i) * 6 + j) * elem], elem);
        }
      }
      buffers.push_back(std::move(cols));
      sd.Set(key, TensorView::Shard(buffers.back().data(), g.dtype, {rows, 6},
                                    g.shape, {rb, 0})
                      .WithStrides({1, rows}));
    }
    EXPECT_TRUE(db->Save(sd, {.step = 3}).ok());
  });
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, SmallChunks());
    // Columns [3 rank, 3 rank + 3) land in columns 0, 2, 4 of an 8 x 6
    // buffer: strides {6, 2}.
    std::vector<std::vector<uint8_t>> buffers;
    buffers.reserve(tensors.size());
    StateDict sd;
    for (const auto& [key, g] : tensors) {
      buffers.emplace_back(48 * DTypeSize(g.dtype), 0xEE);
      sd.Set(key, TensorView::Shard(buffers.back().data(), g.dtype, {8, 3},
                                    g.shape, {0, 3 * rank})
                      .WithStrides({6, 2}));
    }
    auto result = db->Load(sd, CheckpointSelector::Step(3), {});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    size_t k = 0;
    for (const auto& [key, g] : tensors) {
      const size_t elem = DTypeSize(g.dtype);
      std::vector<uint8_t> want(48 * elem, 0xEE);
      for (int64_t i = 0; i < 8; ++i) {
        for (int64_t j = 0; j < 3; ++j) {
          std::memcpy(&want[(i * 6 + 2 * j) * elem],
                      &g.bytes[(i * 6 + 3 * rank + j) * elem], elem);
        }
      }
      EXPECT_EQ(buffers[k], want) << key << " on rank " << rank;
      ++k;
    }
  });
}

}  // namespace
}  // namespace ckptdb
