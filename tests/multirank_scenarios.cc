// Save on N ranks and load on M ranks with other shardings: layout gathering,
// writer choice, one reader per chunk, slices sent between ranks, error
// agreement. Built twice (tests/testing/group.h): ranks as threads
// (multirank_test) and ranks as mpirun processes (mpi_multirank_test).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <set>

#include "ckptdb/db.h"
#include "tests/testing/fault_injection.h"
#include "tests/testing/group.h"
#include "tests/testing/ranks.h"

namespace ckptdb {
namespace {

using testing::FaultInjector;
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

enum class Layout { kRows, kColumns, kGrid, kReplicated };

// Rank `r` of `m`'s box of a 2-D tensor under `layout`.
std::pair<Shape, Shape> BoxOf(const Shape& shape, Layout layout, int r, int m) {
  switch (layout) {
    case Layout::kRows: {
      auto [b, e] = Part(shape[0], r, m);
      return {{b, 0}, {e - b, shape[1]}};
    }
    case Layout::kColumns: {
      auto [b, e] = Part(shape[1], r, m);
      return {{0, b}, {shape[0], e - b}};
    }
    case Layout::kGrid: {
      const int rows = m >= 4 ? 2 : 1, cols = m / rows;
      auto [rb, re] = Part(shape[0], r / cols, rows);
      auto [cb, ce] = Part(shape[1], r % cols, cols);
      return {{rb, cb}, {re - rb, ce - cb}};
    }
    case Layout::kReplicated:
      return {{0, 0}, shape};
  }
  return {};
}

// The reference framework's scenario: ranks 0-1 hold rows of w1, ranks 2-3 rows
// of w2; the checkpoint is then loaded on 1, 2, 4 and 8 ranks with row, column,
// 2-D and replicated layouts.
TEST(MultiRankTest, ReferenceScenarioReshardsToEveryLayout) {
  SharedTempDir dir;
  const GlobalTensor w1(DType::kFloat32, {8, 6}, 1),
      w2(DType::kFloat32, {8, 6}, 2);
  if (MaxRanks() < 4) GTEST_SKIP() << "needs 4 ranks";
  const uint64_t stored = 2 * 8 * 6 * 4;
  RunRanks(4, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    const GlobalTensor& g = rank < 2 ? w1 : w2;
    auto [b, e] = Part(8, rank % 2, 2);
    OwnedShard shard = ShardOf(g, {b, 0}, {e - b, 6});
    StateDict sd;
    sd.Set(rank < 2 ? "w1" : "w2", shard.View(g));
    auto info = db->Save(sd, {.step = 1});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    if (info.ok()) {
      EXPECT_EQ(info->world_size, 4);
      EXPECT_EQ(info->num_tensors, 2);
      EXPECT_EQ(static_cast<uint64_t>(info->nbytes), stored);
    }
  });

  for (int m : {1, 2, 4, 8}) {
    if (m > MaxRanks()) continue;
    for (Layout layout : {Layout::kRows, Layout::kColumns, Layout::kGrid,
                          Layout::kReplicated}) {
      RunRanks(m, [&](int rank, std::shared_ptr<Communicator> comm) {
        auto db = OpenRank(dir.path(), comm);
        auto [o1, l1] = BoxOf(w1.shape, layout, rank, m);
        auto [o2, l2] = BoxOf(w2.shape, layout, rank, m);
        OwnedShard t1 = TargetOf(w1, o1, l1), t2 = TargetOf(w2, o2, l2);
        StateDict sd;
        sd.Set("w1", t1.View(w1));
        sd.Set("w2", t2.View(w2));
        auto result = db->Load(sd, CheckpointSelector::Latest(), {});
        EXPECT_TRUE(result.ok()) << result.status().ToString();
        EXPECT_EQ(t1.bytes, w1.Slice(o1, l1)) << "m=" << m << " rank " << rank;
        EXPECT_EQ(t2.bytes, w2.Slice(o2, l2)) << "m=" << m << " rank " << rank;
        const LoadStats stats = result.ok() ? result->stats : LoadStats{};
        const uint64_t read = SumOver(*comm, stats.bytes_read);
        const uint64_t needed = SumOver(*comm, stats.bytes_needed);
        // Every stored chunk is read exactly once across all ranks, whatever
        // the layout.
        EXPECT_EQ(read, stored) << "m=" << m;
        if (layout != Layout::kReplicated) {
          EXPECT_EQ(needed, stored);
        }
      });
    }
  }
}

TEST(MultiRankTest, ReplicasAreStoredOnceByBalancedWriters) {
  if (MaxRanks() < 4) GTEST_SKIP() << "needs 4 ranks";
  SharedTempDir dir;
  const GlobalTensor bias(DType::kFloat32, {1000}, 3),
      w(DType::kBFloat16, {4, 1000}, 4);
  RunRanks(4, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    // Data-parallel pairs: ranks {0, 1} hold rows 0-1, ranks {2, 3} rows 2-3;
    // all hold the bias.
    OwnedShard b = ShardOf(bias, {0}, {1000});
    OwnedShard ws = ShardOf(w, {rank < 2 ? 0 : 2, 0}, {2, 1000});
    StateDict sd;
    sd.Set("bias", b.View(bias));
    sd.Set("w", ws.View(w));
    sd.Set("epoch",
           Value(int64_t{10 + rank}));  // small values: the lowest rank's wins
    auto info = db->Save(sd, {});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    if (info.ok()) {
      EXPECT_EQ(info->nbytes, 1000 * 4 + 4 * 1000 * 2);
    }
  });
  RunRanks(1, [&](int, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    auto meta = db->GetMetadata(CheckpointSelector::Latest());
    ASSERT_TRUE(meta.ok());
    EXPECT_EQ(std::get<int64_t>(meta->values.at("epoch")), 10);
    std::set<int> writers;
    for (const auto& [key, t] : meta->tensors) {
      for (const auto& c : t.chunks) writers.insert(c.writer_rank);
    }
    // Three boxes spread over three ranks, not all on rank 0.
    EXPECT_EQ(writers.size(), 3u);
    auto read = db->Read("w", CheckpointSelector::Latest());
    ASSERT_TRUE(read.ok());
    EXPECT_EQ(std::memcmp(read->data.data(), w.bytes.data(), w.bytes.size()),
              0);
  });
}

TEST(MultiRankTest, OptimizerWithMasterWeightsLoadsIntoAnotherSharding) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  // bf16 weights, fp32 master weights and Adam moments, tensor-parallel by
  // columns on 2 ranks.
  std::map<std::string, GlobalTensor> state = {
      {"model.fc.weight", GlobalTensor(DType::kBFloat16, {64, 48}, 10)},
      {"optimizer.master_weights.fc.weight",
       GlobalTensor(DType::kFloat32, {64, 48}, 11)},
      {"optimizer.exp_avg.fc.weight",
       GlobalTensor(DType::kFloat32, {64, 48}, 12)},
      {"optimizer.exp_avg_sq.fc.weight",
       GlobalTensor(DType::kFloat32, {64, 48}, 13)},
  };
  auto build = [](StateDict& sd, const std::string& key, TensorView view) {
    StateDict* d = &sd;
    size_t start = 0, dot;
    while ((dot = key.find('.', start)) != std::string::npos) {
      d = &d->Child(key.substr(start, dot - start));
      start = dot + 1;
    }
    d->Set(key.substr(start), view);
  };
  Options small_chunks;
  small_chunks.max_chunk_bytes = 1024;
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, small_chunks);
    std::vector<OwnedShard> shards;
    shards.reserve(state.size());
    StateDict sd;
    for (auto& [key, g] : state) {
      auto [b, e] = Part(48, rank, 2);
      shards.push_back(ShardOf(g, {0, b}, {64, e - b}));
      build(sd, key, shards.back().View(g));
    }
    sd.Child("optimizer").Set("step", Value(int64_t{500}));
    EXPECT_TRUE(db->Save(sd, {.step = 500}).ok());
  });
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, small_chunks);
    std::vector<OwnedShard> targets;
    targets.reserve(state.size());
    StateDict sd;
    for (auto& [key, g] : state) {
      auto [b, e] = Part(64, rank, 3);
      targets.push_back(TargetOf(g, {b, 0}, {e - b, 48}));
      build(sd, key, targets.back().View(g));
    }
    sd.Child("optimizer").Set("step", Value(int64_t{0}));
    auto result = db->Load(sd, CheckpointSelector::Step(500), {});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    size_t i = 0;
    for (auto& [key, g] : state) {
      EXPECT_EQ(targets[i].bytes, g.Slice(targets[i].offset, targets[i].local))
          << key;
      ++i;
    }
    EXPECT_EQ(std::get<int64_t>(*sd.GetChild("optimizer")->GetValue("step")),
              500);
    // Chunks that straddle two ranks' rows are read once and sent.
    EXPECT_GT(SumOver(*comm, result.ok() ? result->stats.bytes_sent : 0), 0u);
  });
}

// Pipeline stages: ranks hold different key sets; tensor-parallel within a
// stage. Loaded on fewer ranks that each hold whole layers of both stages.
TEST(MultiRankTest, PipelineStagesWithDifferentKeySets) {
  if (MaxRanks() < 4) GTEST_SKIP() << "needs 4 ranks";
  SharedTempDir dir;
  std::vector<GlobalTensor> layers;
  for (int l = 0; l < 4; ++l)
    layers.emplace_back(DType::kFloat32, Shape{16, 10}, 100 + l);
  RunRanks(4, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    const int stage = rank / 2, tp = rank % 2;
    std::vector<OwnedShard> shards;
    shards.reserve(2);
    StateDict sd;
    for (int l = 2 * stage; l < 2 * stage + 2; ++l) {
      auto [b, e] = Part(16, tp, 2);
      shards.push_back(ShardOf(layers[l], {b, 0}, {e - b, 10}));
      sd.Child("layers")
          .Child(std::to_string(l))
          .Set("w", shards.back().View(layers[l]));
    }
    auto info = db->Save(sd, {.step = 3});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    if (info.ok()) {
      EXPECT_EQ(info->num_tensors, 4);
    }
  });
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    std::vector<OwnedShard> targets;
    targets.reserve(4);
    StateDict sd;
    for (int l = 0; l < 4; ++l) {
      auto [b, e] = Part(10, rank, 2);
      targets.push_back(TargetOf(layers[l], {0, b}, {16, e - b}));
      sd.Child("layers")
          .Child(std::to_string(l))
          .Set("w", targets.back().View(layers[l]));
    }
    auto result = db->Load(sd, CheckpointSelector::Step(3), {});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    for (int l = 0; l < 4; ++l) {
      EXPECT_EQ(targets[l].bytes,
                layers[l].Slice(targets[l].offset, targets[l].local))
          << "layer " << l;
    }
  });
}

// Slices large enough to travel as messages of their own (received in place
// when the target holds them as one run, staged otherwise or when cast), mixed
// with small packed ones, through a load buffer so small that the load runs in
// many rounds; the ranks pass different buffer sizes and the smallest is used.
TEST(MultiRankTest, LargeSlicesAndManyRoundsStayBitExact) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor big(DType::kFloat32, {1500, 300}, 21),
      half(DType::kBFloat16, {1500, 600}, 22),
      small(DType::kInt16, {40, 7}, 23);
  Options options;
  options.max_chunk_bytes = 1 << 20;
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, options);
    auto [b, e] = Part(1500, rank, 2);
    auto [sb, se] = Part(40, rank, 2);
    OwnedShard s1 = ShardOf(big, {b, 0}, {e - b, 300}),
               s2 = ShardOf(half, {b, 0}, {e - b, 600}),
               s3 = ShardOf(small, {sb, 0}, {se - sb, 7});
    StateDict sd;
    sd.Set("big", s1.View(big));
    sd.Set("half", s2.View(half));
    sd.Set("small", s3.View(small));
    EXPECT_TRUE(db->Save(sd, {}).ok());
  });
  const uint64_t stored =
      big.bytes.size() + half.bytes.size() + small.bytes.size();
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    Options mine = options;
    mine.load_buffer_bytes = (300 << 10) + (rank == 1 ? 0 : 1 << 20);
    auto db = OpenRank(dir.path(), comm, mine);
    // big: rows in another split (contiguous, in place); half: columns as
    // float32 (strided and cast, staged); small: rows shifted.
    auto [b, e] = Part(1500, (rank + 1) % 3, 3);
    auto [cb, ce] = Part(600, rank, 3);
    auto [sb, se] = Part(40, rank, 3);
    OwnedShard t1 = TargetOf(big, {b, 0}, {e - b, 300});
    std::vector<float> t2(1500 * static_cast<size_t>(ce - cb), -1.f);
    OwnedShard t3 = TargetOf(small, {sb, 0}, {se - sb, 7});
    StateDict sd;
    sd.Set("big", t1.View(big));
    sd.Set("half", TensorView::Shard(t2.data(), DType::kFloat32,
                                     {1500, ce - cb}, half.shape, {0, cb}));
    sd.Set("small", t3.View(small));
    auto result = db->Load(sd, CheckpointSelector::Latest(), {.cast = true});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    EXPECT_EQ(t1.bytes, big.Slice(t1.offset, t1.local));
    EXPECT_EQ(t3.bytes, small.Slice(t3.offset, t3.local));
    const std::vector<uint8_t> raw = half.Slice({0, cb}, {1500, ce - cb});
    size_t wrong = 0;
    for (size_t i = 0; i < t2.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, raw.data() + 2 * i, 2);
      const uint32_t f32 = uint32_t{bits} << 16;
      float want;
      std::memcpy(&want, &f32, 4);
      const bool both_nan = std::isnan(want) && std::isnan(t2[i]);
      if (!both_nan && std::memcmp(&want, &t2[i], 4) != 0) ++wrong;
    }
    EXPECT_EQ(wrong, 0u);
    const LoadStats stats = result.ok() ? result->stats : LoadStats{};
    EXPECT_EQ(SumOver(*comm, stats.bytes_read), stored);
    EXPECT_GE(SumOver(*comm, stats.bytes_sent), uint64_t{256} << 10);
  });
}

// A rank whose chunk reads start failing in the middle of a many-round
// reshard keeps walking its rounds: no rank waits forever, every rank returns
// the error (agreed once, at the end), and a later load succeeds.
TEST(MultiRankTest, AFailingReaderFailsTheLoadEverywhereWithoutHanging) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {600, 64}, 31);
  Options options;
  options.max_chunk_bytes = 4 << 10;     // 75 chunks
  options.load_buffer_bytes = 16 << 10;  // 10 rounds
  RunRanks(2, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, options);
    auto [b, e] = Part(600, rank, 2);
    OwnedShard s = ShardOf(w, {b, 0}, {e - b, 64});
    StateDict sd;
    sd.Set("w", s.View(w));
    EXPECT_TRUE(db->Save(sd, {}).ok());
  });
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto faults = std::make_shared<FaultInjector>();
    Options mine = options;
    mine.file_system_hooks = faults;
    auto db = OpenRank(dir.path(), comm, mine);
    auto [b, e] = Part(64, rank, 3);
    OwnedShard t = TargetOf(w, {0, b}, {600, e - b});
    StateDict sd;
    sd.Set("w", t.View(w));
    if (rank == 1) {
      // Its first read brings the data block of the first rounds' small
      // chunks (cached for the chunks after it); the next block, of later
      // rounds, fails.
      faults->Arm(
          {.nth = 2, .from_nth_on = true, .ops = FileOpMask(FileOp::kRead)});
    }
    auto result = db->Load(sd, CheckpointSelector::Latest(), {});
    EXPECT_FALSE(result.ok());
    EXPECT_NE(result.status().ToString().find("rank 1"), std::string::npos)
        << result.status().ToString();
    EXPECT_EQ(SumOver(*comm, result.ok() ? 0 : 1), 3u);
    faults->Disarm();
    std::fill(t.bytes.begin(), t.bytes.end(), 0);
    auto again = db->Load(sd, CheckpointSelector::Latest(), {});
    EXPECT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(t.bytes, w.Slice(t.offset, t.local));
  });
}

// Random tensors, random N-rank save layouts with replicas, random M-rank
// targets: bit-exact.
class RandomReshardTest : public ::testing::TestWithParam<int> {};

void RandomCells(const Shape& shape, std::mt19937& rng, int depth,
                 std::vector<std::pair<Shape, Shape>>& out, Shape offset = {},
                 Shape local = {}) {
  if (offset.empty() && !shape.empty()) {
    offset.assign(shape.size(), 0);
    local = shape;
  }
  std::vector<size_t> dims;
  for (size_t d = 0; d < local.size(); ++d) {
    if (local[d] > 1) dims.push_back(d);
  }
  if (depth == 0 || dims.empty() || rng() % 3 == 0) {
    out.emplace_back(offset, local);
    return;
  }
  const size_t d = dims[rng() % dims.size()];
  const int64_t cut = 1 + static_cast<int64_t>(rng() % (local[d] - 1));
  Shape lo = local, hi_off = offset, hi = local;
  lo[d] = cut;
  hi_off[d] += cut;
  hi[d] -= cut;
  RandomCells(shape, rng, depth - 1, out, offset, lo);
  RandomCells(shape, rng, depth - 1, out, hi_off, hi);
}

// A state dict holds one shard per key, so a rank keeps only its first cell
// of each tensor; a tensor whose kept cells no longer cover it is saved whole
// by one rank (drawn from `rng`) instead.
std::vector<std::map<size_t, std::pair<Shape, Shape>>> OneCellPerKey(
    const std::vector<std::vector<std::pair<size_t, std::pair<Shape, Shape>>>>&
        save,
    const std::vector<GlobalTensor>& tensors, std::mt19937& rng) {
  const int n = static_cast<int>(save.size());
  std::vector<std::map<size_t, std::pair<Shape, Shape>>> per_rank(n);
  for (int r = 0; r < n; ++r) {
    for (auto& [t, cell] : save[r]) per_rank[r].emplace(t, cell);
  }
  for (size_t t = 0; t < tensors.size(); ++t) {
    int64_t covered = 0;
    std::set<std::pair<Shape, Shape>> distinct;
    for (int r = 0; r < n; ++r) {
      auto it = per_rank[r].find(t);
      if (it != per_rank[r].end()) distinct.insert(it->second);
    }
    for (const auto& c : distinct) covered += NumElements(c.second);
    if (covered != NumElements(tensors[t].shape)) {
      const int owner = static_cast<int>(rng() % n);
      for (int r = 0; r < n; ++r) per_rank[r].erase(t);
      per_rank[owner][t] = {Shape(tensors[t].shape.size(), 0),
                            tensors[t].shape};
    }
  }
  return per_rank;
}

TEST_P(RandomReshardTest, BitExact) {
  std::mt19937 rng(static_cast<unsigned>(GetParam()));
  const int n = 1 + static_cast<int>(rng() % 4),
            m = 1 + static_cast<int>(rng() % 4);
  if (std::max(n, m) > MaxRanks())
    GTEST_SKIP() << "needs " << std::max(n, m) << " ranks";
  const DType types[] = {DType::kFloat32, DType::kBFloat16, DType::kInt8,
                         DType::kFloat64};
  std::vector<GlobalTensor> tensors;
  for (int t = 0; t < 3; ++t) {
    Shape shape;
    const int ndim = static_cast<int>(rng() % 4);
    for (int d = 0; d < ndim; ++d)
      shape.push_back(1 + static_cast<int64_t>(rng() % 9));
    tensors.emplace_back(types[rng() % 4], shape, rng());
  }
  // Save cells: each held by 1..n ranks.
  std::vector<std::vector<std::pair<size_t, std::pair<Shape, Shape>>>> save(n),
      load(m);
  for (size_t t = 0; t < tensors.size(); ++t) {
    std::vector<std::pair<Shape, Shape>> cells;
    RandomCells(tensors[t].shape, rng, 3, cells);
    if (tensors[t].shape.empty()) cells = {{{}, {}}};
    for (const auto& cell : cells) {
      const int copies = 1 + static_cast<int>(rng() % n);
      std::set<int> ranks;
      while (static_cast<int>(ranks.size()) < copies)
        ranks.insert(static_cast<int>(rng() % n));
      for (int r : ranks) save[r].push_back({t, cell});
    }
    cells.clear();
    RandomCells(tensors[t].shape, rng, 3, cells);
    if (tensors[t].shape.empty()) cells = {{{}, {}}};
    // Load: each rank takes at most one cell of each tensor (a key appears once
    // per state dict).
    for (int r = 0; r < m; ++r) {
      if (rng() % 4 != 0) load[r].push_back({t, cells[rng() % cells.size()]});
    }
  }
  SharedTempDir dir;
  Options options;
  options.max_chunk_bytes = 1 + rng() % 64;
  const std::vector<std::map<size_t, std::pair<Shape, Shape>>> per_rank =
      OneCellPerKey(save, tensors, rng);
  RunRanks(n, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, options);
    std::vector<OwnedShard> shards;
    shards.reserve(per_rank[rank].size());
    StateDict sd;
    for (auto& [t, cell] : per_rank[rank]) {
      shards.push_back(ShardOf(tensors[t], cell.first, cell.second));
      sd.Set(std::string("t").append(std::to_string(t)),
             shards.back().View(tensors[t]));
    }
    auto info = db->Save(sd, {});
    EXPECT_TRUE(info.ok()) << info.status().ToString();
  });
  RunRanks(m, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm, options);
    std::vector<OwnedShard> targets;
    targets.reserve(load[rank].size());
    StateDict sd;
    for (auto& [t, cell] : load[rank]) {
      targets.push_back(TargetOf(tensors[t], cell.first, cell.second));
      sd.Set(std::string("t").append(std::to_string(t)),
             targets.back().View(tensors[t]));
    }
    auto result = db->Load(sd, CheckpointSelector::Latest(), {.strict = true});
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    for (size_t i = 0; i < targets.size(); ++i) {
      const auto& [t, cell] = load[rank][i];
      EXPECT_EQ(targets[i].bytes, tensors[t].Slice(cell.first, cell.second))
          << "tensor " << t;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomReshardTest, ::testing::Range(0, 40));

TEST(MultiRankTest, ErrorsAreCollectiveAndLeaveTheStoreUnchanged) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {4, 4}, 5);
  auto save_with =
      [&](const std::function<TensorView(int, OwnedShard&)>& view_of,
          const std::string& needle) {
        RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
          auto db = OpenRank(dir.path(), comm);
          OwnedShard shard = ShardOf(w, {0, 0}, {4, 4});
          StateDict sd;
          sd.Set("w", view_of(rank, shard));
          auto info = db->Save(sd, {});
          EXPECT_FALSE(info.ok());
          if (!info.ok()) {
            EXPECT_TRUE(info.status().IsInvalidArgument())
                << info.status().ToString();
            EXPECT_NE(info.status().message().find(needle), std::string::npos)
                << info.status().ToString();
          }
          EXPECT_EQ(SumOver(*comm, info.ok() ? 0 : 1), 3u)
              << "every rank must see the error";
        });
      };
  // Rank 2 passes a box outside the tensor.
  save_with(
      [&](int rank, OwnedShard& s) {
        return rank == 2 ? TensorView::Shard(s.bytes.data(), DType::kFloat32,
                                             {2, 4}, {4, 4}, {3, 0})
                         : s.View(w);
      },
      "rank 2");
  // Rank 1 disagrees on the dtype.
  save_with(
      [&](int rank, OwnedShard& s) {
        TensorView v = s.View(w);
        if (rank == 1) v.dtype = DType::kInt32;
        return v;
      },
      "rank 1 has int32");
  // Ranks 0 and 1 overlap partially (rows 0-2 and 2-4), rank 2 holds nothing of
  // row 3... a gap or overlap, whichever the planner meets first.
  save_with(
      [&](int rank, OwnedShard& s) {
        if (rank == 0)
          return TensorView::Shard(s.bytes.data(), DType::kFloat32, {3, 4},
                                   {4, 4}, {0, 0});
        return TensorView::Shard(s.bytes.data(), DType::kFloat32, {2, 4},
                                 {4, 4}, {2, 0});
      },
      "overlap");

  // A strict load where only rank 1 asks for a missing key fails on every rank.
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    OwnedShard shard = ShardOf(w, {0, 0}, {4, 4});
    StateDict sd;
    sd.Set("w", shard.View(w));
    EXPECT_TRUE(db->Save(sd, {.tag = "good"}).ok());
    auto listed = db->ListCheckpoints();
    EXPECT_TRUE(listed.ok() && listed->size() == 1u)
        << "failed saves left checkpoints";
    OwnedShard target = TargetOf(w, {0, 0}, {4, 4});
    StateDict want;
    want.Set("w", target.View(w));
    if (rank == 1) want.Set("missing", target.View(w));
    auto result = db->Load(want, CheckpointSelector::Latest(), {});
    EXPECT_FALSE(result.ok());
    EXPECT_TRUE(result.status().IsNotFound()) << result.status().ToString();
    EXPECT_NE(result.status().message().find("'missing'"), std::string::npos);
    // A duplicate tag is refused on every rank too.
    auto dup = db->Save(sd, {.tag = "good"});
    EXPECT_TRUE(dup.status().IsInvalidArgument()) << dup.status().ToString();
    EXPECT_TRUE(db->Delete(CheckpointSelector::Tag("good")).ok());
    EXPECT_TRUE(db->Close().ok());
  });
}

// Ranks list and read right before collective saves and deletes that rank 0
// carries out: their read-only handles never see a half-changed store, and
// every listing after a collective call shows its outcome.
TEST(MultiRankTest, LocalCallsAroundCollectivesSeeWholeCheckpoints) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {6, 4}, 41);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    auto [b, e] = Part(6, rank, 3);
    OwnedShard shard = ShardOf(w, {b, 0}, {e - b, 4});
    StateDict sd;
    sd.Set("w", shard.View(w));
    for (int round = 0; round < 15; ++round) {
      auto saved = db->Save(sd, {.step = round});
      EXPECT_TRUE(saved.ok()) << saved.status().ToString();
      auto listed = db->ListCheckpoints();
      EXPECT_TRUE(listed.ok()) << listed.status().ToString();
      if (listed.ok()) {
        EXPECT_EQ(listed->size(), round == 0 ? 1u : 2u) << "rank " << rank;
      }
      auto read = db->Read("w", CheckpointSelector::Step(round));
      EXPECT_TRUE(read.ok()) << read.status().ToString();
      if (round > 0) {
        EXPECT_TRUE(db->Delete(CheckpointSelector::Step(round - 1)).ok());
        listed = db->ListCheckpoints();
        EXPECT_TRUE(listed.ok() && listed->size() == 1u) << "rank " << rank;
      }
    }
  });
}

// A write refused on one rank while it writes its chunks (its staged file path
// is taken by a directory, which is not ckptdb's) fails the save on every rank
// with Corruption naming the entry; nothing is committed, no staged bytes are
// left, and the next save works.
TEST(MultiRankTest, WriteRefusedOnOneRankFailsTheSaveEverywhere) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  const GlobalTensor w(DType::kFloat32, {9, 5}, 31);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto db = OpenRank(dir.path(), comm);
    auto [b, e] = Part(9, rank, 3);
    OwnedShard shard = ShardOf(w, {b, 0}, {e - b, 5});
    StateDict sd;
    sd.Set("w", shard.View(w));
    auto first = db->Save(sd, {.step = 1});
    EXPECT_TRUE(first.ok()) << first.status().ToString();
    const int64_t next = first.ok() ? first->id + 1 : 0;
    const std::string blocker =
        dir.path() + "/staging/" + std::to_string(next) + "-1-0.sst";
    if (rank == 1) std::filesystem::create_directories(blocker);
    EXPECT_TRUE(comm->Barrier().ok());
    auto failed = db->Save(sd, {.step = 2});
    EXPECT_FALSE(failed.ok());
    EXPECT_TRUE(failed.status().IsCorruption()) << failed.status().ToString();
    EXPECT_NE(failed.status().message().find("rank 1"), std::string::npos)
        << failed.status().ToString();
    EXPECT_NE(failed.status().message().find(blocker + " is a directory"),
              std::string::npos)
        << failed.status().ToString();
    auto listed = db->ListCheckpoints();
    EXPECT_TRUE(listed.ok() && listed->size() == 1u);
    EXPECT_TRUE(comm->Barrier().ok());
    if (rank == 0) {
      std::error_code ec;
      for (const auto& entry :
           std::filesystem::directory_iterator(dir.path() + "/staging", ec)) {
        // The test's own blocker (a directory) is not the save's to remove.
        if (entry.path() == blocker) continue;
        ADD_FAILURE() << "left in staging: " << entry.path();
      }
      std::filesystem::remove_all(blocker, ec);
    }
    EXPECT_TRUE(comm->Barrier().ok());
    auto again = db->Save(sd, {.step = 2});
    EXPECT_TRUE(again.ok()) << again.status().ToString();
    OwnedShard target = TargetOf(w, {0, 0}, {9, 5});
    StateDict want;
    want.Set("w", target.View(w));
    EXPECT_TRUE(db->Load(want, CheckpointSelector::Step(2), {}).ok());
    EXPECT_EQ(target.bytes, w.bytes);
  });
}

// The same with an I/O error on rank 1's value file (large chunks): the save
// fails everywhere, naming the rank and the file. The value files written
// stay until the next save starts (the failed one might have committed after
// all), which removes them and writes its own.
TEST(MultiRankTest, ValueFileErrorOnOneRankFailsTheSaveEverywhere) {
  if (MaxRanks() < 3) GTEST_SKIP() << "needs 3 ranks";
  SharedTempDir dir;
  // 128 KiB a rank: each rank's chunk goes to a value file. The second
  // state differs everywhere, so that an incremental save writes it all.
  const GlobalTensor w(DType::kFloat32, {96, 1024}, 37);
  const GlobalTensor w2(DType::kFloat32, {96, 1024}, 38);
  RunRanks(3, [&](int rank, std::shared_ptr<Communicator> comm) {
    auto faults = std::make_shared<FaultInjector>();
    Options options;
    if (rank == 1) options.file_system_hooks = faults;
    auto db = OpenRank(dir.path(), comm, options);
    auto [b, e] = Part(96, rank, 3);
    OwnedShard shard = ShardOf(w, {b, 0}, {e - b, 1024});
    StateDict sd;
    sd.Set("w", shard.View(w));
    auto first = db->Save(sd, {.step = 1});
    EXPECT_TRUE(first.ok()) << first.status().ToString();
    const int64_t next = first.ok() ? first->id + 1 : 0;
    const std::string values = dir.path() + "/values/" + std::to_string(next);
    OwnedShard shard2 = ShardOf(w2, {b, 0}, {e - b, 1024});
    StateDict sd2;
    sd2.Set("w", shard2.View(w2));
    faults->Arm({.nth = 1,
                 .ops = FileOpMask(FileOp::kWrite),
                 .path_contains = "/values/"});
    auto failed = db->Save(sd2, {.step = 2});
    faults->Disarm();
    EXPECT_FALSE(failed.ok());
    EXPECT_TRUE(failed.status().IsIOError()) << failed.status().ToString();
    EXPECT_NE(failed.status().message().find("rank 1"), std::string::npos)
        << failed.status().ToString();
    if (rank == 1) {
      ASSERT_EQ(faults->injected().size(), 1u);
      EXPECT_NE(failed.status().message().find(faults->injected()[0].path),
                std::string::npos)
          << failed.status().ToString();
    }
    EXPECT_TRUE(comm->Barrier().ok());
    auto again = db->Save(sd2, {.step = 2});
    EXPECT_TRUE(again.ok()) << again.status().ToString();
    OwnedShard target = TargetOf(w2, {0, 0}, {96, 1024});
    StateDict want;
    want.Set("w", target.View(w2));
    EXPECT_TRUE(db->Load(want, CheckpointSelector::Step(2), {}).ok());
    EXPECT_EQ(target.bytes, w2.bytes);
    EXPECT_TRUE(comm->Barrier().ok());
    if (rank == 0) {
      // Exactly the retry's three value files, one per rank, holding the state.
      std::uintmax_t bytes = 0;
      int files = 0;
      for (const auto& file : ckptdb::testing::FilesUnder(values)) {
        ++files;
        bytes += file.size;
      }
      EXPECT_EQ(files, 3);
      EXPECT_EQ(bytes, w2.bytes.size());
    }
  });
}

}  // namespace
}  // namespace ckptdb
