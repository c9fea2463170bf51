#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ckptdb/communicator.h"
#include "ckptdb/db.h"
#include "ckptdb/types.h"
#include "engine/copy/box_copy.h"
#include "engine/copy/dtype_convert.h"

namespace ckptdb::testing {

// Opens the store at `path` as one rank of `comm`; nullptr (and a test
// failure) when that fails.
inline std::unique_ptr<DB> OpenRank(const std::string& path,
                                    std::shared_ptr<Communicator> comm,
                                    Options options = {}) {
  auto db = DB::Open(options, path, std::move(comm));
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(db).value() : nullptr;
}

// A whole tensor with deterministic contents, from which shards are cut.
struct GlobalTensor {
  DType dtype = DType::kFloat32;
  Shape shape;
  std::vector<uint8_t> bytes;

  GlobalTensor() = default;
  GlobalTensor(DType t, Shape s, uint64_t seed)
      : dtype(t), shape(std::move(s)) {
    bytes.resize(static_cast<size_t>(NumElements(shape)) * DTypeSize(t));
    std::mt19937_64 rng(seed);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (t == DType::kBool) {
      for (auto& b : bytes) b &= 1;
    }
  }

  // The same values converted to `to`: what a cast load yields.
  GlobalTensor As(DType to) const {
    GlobalTensor out;
    out.dtype = to;
    out.shape = shape;
    out.bytes.resize(static_cast<size_t>(NumElements(shape)) * DTypeSize(to));
    engine::ConvertElements(bytes.data(), dtype, out.bytes.data(), to,
                            static_cast<size_t>(NumElements(shape)));
    return out;
  }

  // The bytes of the box [offset, offset + local) in row-major order.
  std::vector<uint8_t> Slice(const Shape& offset, const Shape& local) const {
    std::vector<uint8_t> out(static_cast<size_t>(NumElements(local)) *
                             DTypeSize(dtype));
    const Shape zero(local.size(), 0);
    engine::CopyBox({bytes.data(), shape, offset}, dtype,
                    {out.data(), local, zero}, dtype, local);
    return out;
  }
};

// A shard buffer owned by a test rank, with the view that points at it.
struct OwnedShard {
  std::vector<uint8_t> bytes;
  Shape offset, local;
  TensorView View(const GlobalTensor& g) {
    return TensorView::Shard(bytes.data(), g.dtype, local, g.shape, offset);
  }
};

inline OwnedShard ShardOf(const GlobalTensor& g, Shape offset, Shape local) {
  OwnedShard s{g.Slice(offset, local), std::move(offset), std::move(local)};
  return s;
}

// An empty (zero-filled) target of the same box.
inline OwnedShard TargetOf(const GlobalTensor& g, Shape offset, Shape local) {
  OwnedShard s{
      std::vector<uint8_t>(
          static_cast<size_t>(NumElements(local)) * DTypeSize(g.dtype), 0),
      std::move(offset), std::move(local)};
  return s;
}

// [begin, end) of part `i` of `n` of an extent.
inline std::pair<int64_t, int64_t> Part(int64_t extent, int i, int n) {
  return {extent * i / n, extent * (i + 1) / n};
}

}  // namespace ckptdb::testing
