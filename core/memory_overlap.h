#pragma once

#include <cstddef>
#include <cstdint>

#include "ckptdb/types.h"

namespace ckptdb::planner {

// The memory a strided array's elements occupy: element 0 at byte `base`,
// elements of `element_bytes` bytes, and per dimension an extent (`shape`)
// and a non-negative element stride. For the check that a load writes no byte
// twice: no two elements of one target, and no two targets, share memory.
struct StridedMemory {
  uintptr_t base = 0;
  size_t element_bytes = 1;
  Shape shape;
  Shape strides;  // element strides, one per dimension of `shape`
};

// [begin, end) of bytes.
struct ByteRange {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool empty() const { return begin >= end; }
};

// The smallest range holding the bytes of every element (empty when there is
// none).
ByteRange Extent(const StridedMemory& m);

// The answer of an exact overlap test, or kUnknown when proving it would
// take more than `max_runs` contiguous runs of bytes.
enum class Overlap { kNone, kSome, kUnknown };

// Whether a byte belongs to two different elements of `m` (a stride of 0 on
// a dimension longer than 1 is the simplest case).
Overlap SelfOverlap(const StridedMemory& m, size_t max_runs);

// Whether a byte belongs to an element of `a` and to one of `b`.
Overlap MutualOverlap(const StridedMemory& a, const StridedMemory& b,
                      size_t max_runs);

}  // namespace ckptdb::planner
