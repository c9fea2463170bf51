#pragma once

// What the DB's tests share: buffers of known bytes and an open that must
// succeed.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ckptdb/db.h"

namespace ckptdb::testing {

// An owned buffer with deterministic contents.
struct Buf {
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
  Buf(DType t, Shape s, uint32_t seed = 1) : dtype(t), shape(std::move(s)) {
    bytes.resize(static_cast<size_t>(NumElements(shape)) * DTypeSize(t));
    std::mt19937 rng(seed);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    if (t == DType::kBool) {
      for (auto& b : bytes) b &= 1;
    }
  }
  TensorView Whole() { return TensorView::Whole(bytes.data(), dtype, shape); }
};

// DB::Open of `path`, failing the test (and returning nullptr) when it fails.
inline std::unique_ptr<DB> OpenOrDie(const std::string& path,
                                     Options options = {}) {
  auto db = DB::Open(options, path);
  EXPECT_TRUE(db.ok()) << db.status().ToString();
  return db.ok() ? std::move(db).value() : nullptr;
}

// Default options but for `hooks`, which see every file operation.
inline Options WithHooks(std::shared_ptr<FileSystemHooks> hooks) {
  Options options;
  options.file_system_hooks = std::move(hooks);
  return options;
}

}  // namespace ckptdb::testing
