// Micro-benchmarks of the pure parts: save and load planning, key encoding,
// metadata codec, box copies.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "core/checksum.h"
#include "core/partition.h"
#include "engine/copy/box_copy.h"
#include "planner/load_plan.h"
#include "planner/save_plan.h"
#include "storage/keys.h"
#include "storage/metadata_codec.h"
#include "storage/record_copies.h"

namespace ckptdb {
namespace {

// `tensors` tensors of `rows` x 1024 stored in single-row chunks; each of
// `ranks` load ranks wants a column slab of every tensor.
void BM_BuildLoadPlan(benchmark::State& state) {
  const int64_t chunks_total = state.range(0);
  const int ranks = static_cast<int>(state.range(1));
  const int64_t tensors = 100, rows = chunks_total / tensors, cols = 1024;
  std::map<std::string, TensorMetadata> stored;
  std::vector<std::vector<planner::LoadTarget>> targets(ranks);
  for (int64_t t = 0; t < tensors; ++t) {
    TensorMetadata meta{DType::kFloat32, {rows, cols}, {}};
    for (int64_t r = 0; r < rows; ++r)
      meta.chunks.push_back({Box{{r, 0}, {1, cols}}, 0, cols * 4, 0});
    const std::string key = std::string("t").append(std::to_string(t));
    stored[key] = std::move(meta);
    for (int k = 0; k < ranks; ++k) {
      const int64_t begin = rows * k / ranks, end = rows * (k + 1) / ranks;
      targets[k].push_back({key, {{begin, 0}, {end - begin, cols}}});
    }
  }
  for (auto _ : state) {
    auto plan = planner::BuildLoadPlan(stored, targets);
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations() * chunks_total);
}
BENCHMARK(BM_BuildLoadPlan)
    ->Args({10'000, 64})
    ->Args({1'000'000, 1024})
    ->Unit(benchmark::kMillisecond);

// `shards` shards in all over `ranks` ranks: tensors of (ranks / 2 * 16) x
// 1024 float32 split by rows over half the ranks, each row block held by two
// ranks (data-parallel replicas).
void BM_BuildSavePlan(benchmark::State& state) {
  const int64_t shards = state.range(0);
  const int ranks = static_cast<int>(state.range(1));
  const int64_t tensors = shards / ranks, blocks = ranks / 2, rows = 16;
  std::vector<planner::RankSaveLayout> layouts(ranks);
  for (int64_t t = 0; t < tensors; ++t) {
    const std::string key = std::string("t").append(std::to_string(t));
    for (int r = 0; r < ranks; ++r) {
      const int64_t block = r % blocks;
      layouts[r].shards.push_back({key,
                                   {key},
                                   DType::kFloat32,
                                   {blocks * rows, 1024},
                                   {{block * rows, 0}, {rows, 1024}}});
    }
  }
  for (auto _ : state) {
    auto plan = planner::BuildSavePlan(layouts, 512 << 10);
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations() * shards);
}
BENCHMARK(BM_BuildSavePlan)
    ->Args({10'000, 64})
    ->Args({1'000'000, 1024})
    ->Unit(benchmark::kMillisecond);

// One tensor split into a side x side grid of 4 x 4 boxes, dealt round-robin
// to 1024 ranks: the layout where a sweep along one dimension meets `side`
// open boxes at every step.
void BM_BuildSavePlanGrid(benchmark::State& state) {
  const int64_t side = state.range(0);
  std::vector<planner::RankSaveLayout> layouts(1024);
  for (int64_t i = 0; i < side; ++i) {
    for (int64_t j = 0; j < side; ++j) {
      layouts[(i * side + j) % 1024].shards.push_back(
          {"w",
           {"w"},
           DType::kFloat32,
           {side * 4, side * 4},
           {{i * 4, j * 4}, {4, 4}}});
    }
  }
  for (auto _ : state) {
    auto plan = planner::BuildSavePlan(layouts, 512 << 10);
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(state.iterations() * side * side);
}
BENCHMARK(BM_BuildSavePlanGrid)
    ->Arg(100)
    ->Arg(300)
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond);

// The partition check alone on 10^6 boxes of one tensor: arg 0 = 10^6 row
// chunks, 1 = a 1000 x 1000 grid, 2 = 500 x 1000 row blocks held twice
// (replicas allowed).
void BM_CheckPartition(benchmark::State& state) {
  std::vector<planner::Box> boxes;
  Shape shape;
  planner::PartitionOptions options;
  switch (state.range(0)) {
    case 0:
      shape = {1'000'000, 1024};
      for (int64_t r = 0; r < 1'000'000; ++r)
        boxes.push_back({{r, 0}, {1, 1024}});
      break;
    case 1:
      shape = {4000, 4000};
      for (int64_t i = 0; i < 1000; ++i) {
        for (int64_t j = 0; j < 1000; ++j)
          boxes.push_back({{i * 4, j * 4}, {4, 4}});
      }
      break;
    default:
      shape = {500'000, 1024};
      options.allow_replicas = true;
      for (int copy = 0; copy < 2; ++copy) {
        for (int64_t r = 0; r < 500'000; ++r)
          boxes.push_back({{r, 0}, {1, 1024}});
      }
      break;
  }
  for (auto _ : state) {
    auto problem = planner::CheckPartition(shape, boxes, options);
    if (!problem.ok()) state.SkipWithError(problem.ToString().c_str());
    benchmark::DoNotOptimize(problem);
  }
  state.SetItemsProcessed(state.iterations() *
                          static_cast<int64_t>(boxes.size()));
}
BENCHMARK(BM_CheckPartition)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

void BM_EncodeChunkKey(benchmark::State& state) {
  const Shape offset = {4096, 0, 128};
  for (auto _ : state) {
    benchmark::DoNotOptimize(storage::EncodeChunkKey(
        42, 3, "optimizer.exp_avg.layers.17.mlp.fc1.weight", offset));
  }
}
BENCHMARK(BM_EncodeChunkKey);

// A checkpoint of `tensors` tensors of [rows * 16, 8192] bf16, each in rows x
// 8 chunks of [16, 1024] (256 KiB), written by `world` ranks spread like a
// data-parallel save's (replicated boxes split across their holders).
CheckpointMetadata MetadataSample(int64_t tensors, int64_t rows,
                                  int32_t world) {
  CheckpointMetadata meta;
  meta.info.id = 1;
  meta.info.world_size = world;
  uint64_t next = 1;
  for (int64_t t = 0; t < tensors; ++t) {
    TensorMetadata tensor{DType::kBFloat16, {rows * 16, 8192}, {}};
    tensor.chunks.reserve(static_cast<size_t>(rows * 8));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < 8; ++c) {
        next = next * 6364136223846793005ull + 1442695040888963407ull;
        const auto writer = static_cast<int32_t>(
            (t * 8 + c + 128 * static_cast<int64_t>(next >> 50)) % world);
        tensor.chunks.push_back(
            {Box{{r * 16, c * 1024}, {16, 1024}}, writer, 16 * 1024 * 2, next});
      }
    }
    meta.info.nbytes += rows * 16 * 8192 * 2;
    const std::string key = "layers." + std::to_string(t) + ".weight";
    meta.tensors[key] = std::move(tensor);
    meta.flat_mapping[key] = {key};
  }
  meta.info.num_tensors = tensors;
  return meta;
}

// Records' bytes per chunk, as counters.
void CountRecordBytes(
    benchmark::State& state,
    const std::vector<std::pair<std::string, std::string>>& records,
    int64_t chunks) {
  double bytes = 0;
  for (const auto& [key, value] : records)
    bytes += static_cast<double>(key.size() + value.size());
  state.counters["bytes"] = bytes;
  state.counters["bytes_per_chunk"] = bytes / static_cast<double>(chunks);
}

// Encodes and decodes a whole checkpoint: range(0) tensors of 8 chunks.
void BM_MetadataRoundTrip(benchmark::State& state) {
  const CheckpointMetadata meta = MetadataSample(state.range(0), 1, 8);
  for (auto _ : state) {
    auto decoded = storage::DecodeCheckpointRecords(
        storage::EncodeCheckpointRecords(meta));
    if (!decoded.ok()) state.SkipWithError(decoded.status().ToString().c_str());
    benchmark::DoNotOptimize(decoded);
  }
  CountRecordBytes(state, storage::EncodeCheckpointRecords(meta),
                   state.range(0) * 8);
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_MetadataRoundTrip)->Arg(1000)->Unit(benchmark::kMillisecond);

// 10^6 chunks (1000 tensors of 1000 chunks) written by 16384 ranks: decoding
// all of it (range(0) == 0), or the main record and one tensor's record (1),
// what a rank that loads one tensor does; or the same checkpoint's format-1
// record (2), which every loading rank decoded whole.
void BM_MetadataDecode(benchmark::State& state) {
  const CheckpointMetadata meta = MetadataSample(1000, 125, 16384);
  if (state.range(0) == 2) {
    const std::string v1 = storage::EncodeCheckpointV1(meta);
    for (auto _ : state) {
      auto decoded = storage::DecodeMainRecord(v1);
      if (!decoded.ok())
        state.SkipWithError(decoded.status().ToString().c_str());
      benchmark::DoNotOptimize(decoded);
    }
    CountRecordBytes(state, {{storage::MetaKey(1), v1}}, 1000 * 1000);
    state.SetLabel("format 1, whole checkpoint");
    return;
  }
  const auto records = storage::EncodeCheckpointRecords(meta);
  const bool one = state.range(0) == 1;
  const std::string key = "layers.500.weight";
  const std::string record_key = storage::TensorRecordKey(1, key);
  std::string record;
  for (const auto& [k, v] : records) {
    if (k == record_key) record = v;
  }
  for (auto _ : state) {
    if (!one) {
      auto decoded = storage::DecodeCheckpointRecords(records);
      if (!decoded.ok())
        state.SkipWithError(decoded.status().ToString().c_str());
      benchmark::DoNotOptimize(decoded);
      continue;
    }
    auto main = storage::DecodeMainRecord(records[0].second);
    if (!main.ok()) state.SkipWithError(main.status().ToString().c_str());
    auto chunks = storage::DecodeTensorRecord(*main, key, record);
    if (!chunks.ok()) state.SkipWithError(chunks.status().ToString().c_str());
    benchmark::DoNotOptimize(chunks);
  }
  CountRecordBytes(state, records, 1000 * 1000);
  state.SetLabel(one ? "main record + one tensor" : "whole checkpoint");
}
BENCHMARK(BM_MetadataDecode)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// The second copy of a checkpoint's records (copies/<id>.rec), for 10^6
// chunks written by 16384 ranks: encoding the records (range(0) == 0, the
// baseline every commit pays), encoding their copy (1, compressed), decoding
// the copy (2). Counters: the copy's bytes against the records'.
void BM_RecordCopy(benchmark::State& state) {
  const CheckpointMetadata meta = MetadataSample(1000, 125, 16384);
  const auto records = storage::EncodeCheckpointRecords(meta);
  const std::string copy =
      storage::EncodeCopy(storage::CopyKind::kRecords, records);
  for (auto _ : state) {
    if (state.range(0) == 0) {
      benchmark::DoNotOptimize(storage::EncodeCheckpointRecords(meta));
    } else if (state.range(0) == 1) {
      benchmark::DoNotOptimize(
          storage::EncodeCopy(storage::CopyKind::kRecords, records));
    } else {
      auto decoded = storage::DecodeCopy(storage::CopyKind::kRecords, copy);
      if (!decoded.ok())
        state.SkipWithError(decoded.status().ToString().c_str());
      benchmark::DoNotOptimize(decoded);
    }
  }
  CountRecordBytes(state, records, 1000 * 1000);
  state.counters["copy_bytes"] = static_cast<double>(copy.size());
  state.SetLabel(state.range(0) == 0   ? "EncodeCheckpointRecords"
                 : state.range(0) == 1 ? "EncodeCopy"
                                       : "DecodeCopy");
}
BENCHMARK(BM_RecordCopy)->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// Copies a column half of a 4096 x 4096 fp32 matrix (strided rows).
void BM_CopyBoxColumns(benchmark::State& state) {
  const Shape whole = {4096, 4096}, half = {4096, 2048}, zero = {0, 0},
              at = {0, 2048};
  std::vector<float> src(4096 * 4096), dst(4096 * 2048);
  std::iota(src.begin(), src.end(), 0.f);
  for (auto _ : state) {
    engine::CopyBox({src.data(), whole, at}, DType::kFloat32,
                    {dst.data(), half, zero}, DType::kFloat32, half);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(dst.size() * 4));
}
BENCHMARK(BM_CopyBoxColumns)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ckptdb

// A 512 KiB chunk's checksum, by each implementation this CPU runs: arg i is
// the i-th of ChecksumImpls(), fastest first (the one ckptdb uses) down to the
// Debian library's baseline-x86-64 build.
void BM_ChunkChecksum(benchmark::State& state) {
  const auto impls = ckptdb::storage::ChecksumImpls();
  const auto index = static_cast<size_t>(state.range(0));
  if (index >= impls.size()) {
    state.SkipWithError("this CPU has fewer checksum implementations");
    return;
  }
  std::vector<unsigned char> chunk(size_t{512} << 10);
  std::iota(chunk.begin(), chunk.end(), 0);
  for (auto _ : state) {
    benchmark::DoNotOptimize(impls[index].fn(chunk.data(), chunk.size()));
  }
  state.SetLabel(impls[index].name);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(chunk.size()));
}
BENCHMARK(BM_ChunkChecksum)->DenseRange(0, 2);

BENCHMARK_MAIN();
