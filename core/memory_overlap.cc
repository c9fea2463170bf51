#include "core/memory_overlap.h"

#include <algorithm>
#include <vector>

namespace ckptdb::planner {
namespace {

struct Dim {
  int64_t extent;
  uint64_t stride_bytes;
};

// The dimensions longer than 1, by stride, innermost first.
std::vector<Dim> SortedDims(const StridedMemory& m) {
  std::vector<Dim> dims;
  for (size_t d = 0; d < m.shape.size(); ++d) {
    if (m.shape[d] > 1) {
      dims.push_back(
          {m.shape[d], static_cast<uint64_t>(m.strides[d]) * m.element_bytes});
    }
  }
  std::sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
    return a.stride_bytes < b.stride_bytes;
  });
  return dims;
}

bool HasNoElement(const StridedMemory& m) {
  return std::any_of(m.shape.begin(), m.shape.end(),
                     [](int64_t n) { return n == 0; });
}

// The array as contiguous runs of `run_bytes` at the offsets of the
// dimensions outside the run; false when there would be more than
// `max_runs`.
bool Runs(const StridedMemory& m, size_t max_runs,
          std::vector<ByteRange>* out) {
  std::vector<Dim> dims = SortedDims(m);
  uint64_t run_bytes = m.element_bytes;
  size_t inner = 0;
  while (inner < dims.size() && dims[inner].stride_bytes == run_bytes) {
    run_bytes *= static_cast<uint64_t>(dims[inner].extent);
    ++inner;
  }
  uint64_t count = 1;
  for (size_t d = inner; d < dims.size(); ++d) {
    count *= static_cast<uint64_t>(dims[d].extent);
    if (count > max_runs) return false;
  }
  out->clear();
  out->reserve(count);
  std::vector<int64_t> index(dims.size(), 0);
  uint64_t offset = 0;
  for (uint64_t r = 0; r < count; ++r) {
    out->push_back({m.base + offset, m.base + offset + run_bytes});
    for (size_t d = inner; d < dims.size(); ++d) {  // odometer, inner first
      offset += dims[d].stride_bytes;
      if (++index[d] < dims[d].extent) break;
      offset -= dims[d].stride_bytes * static_cast<uint64_t>(dims[d].extent);
      index[d] = 0;
    }
  }
  std::sort(
      out->begin(), out->end(),
      [](const ByteRange& a, const ByteRange& b) { return a.begin < b.begin; });
  return true;
}

// Sorted runs as their union: disjoint, sorted ranges.
std::vector<ByteRange> Union(const std::vector<ByteRange>& runs) {
  std::vector<ByteRange> out;
  for (const ByteRange& r : runs) {
    if (!out.empty() && r.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, r.end);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

}  // namespace

ByteRange Extent(const StridedMemory& m) {
  if (HasNoElement(m)) return {m.base, m.base};
  uint64_t last = 0;
  for (const Dim& d : SortedDims(m))
    last += d.stride_bytes * static_cast<uint64_t>(d.extent - 1);
  return {m.base, m.base + last + m.element_bytes};
}

Overlap SelfOverlap(const StridedMemory& m, size_t max_runs) {
  if (HasNoElement(m)) return Overlap::kNone;
  // Each dimension stepping over everything inside it: no two elements meet.
  uint64_t span = m.element_bytes;
  bool nested = true;
  for (const Dim& d : SortedDims(m)) {
    if (d.stride_bytes == 0) return Overlap::kSome;
    nested = nested && d.stride_bytes >= span;
    span += d.stride_bytes * static_cast<uint64_t>(d.extent - 1);
  }
  if (nested) return Overlap::kNone;
  std::vector<ByteRange> runs;
  if (!Runs(m, max_runs, &runs)) return Overlap::kUnknown;
  for (size_t i = 1; i < runs.size(); ++i) {
    if (runs[i].begin < runs[i - 1].end) return Overlap::kSome;
  }
  return Overlap::kNone;
}

Overlap MutualOverlap(const StridedMemory& a, const StridedMemory& b,
                      size_t max_runs) {
  const ByteRange ea = Extent(a), eb = Extent(b);
  if (ea.empty() || eb.empty() || ea.end <= eb.begin || eb.end <= ea.begin)
    return Overlap::kNone;
  std::vector<ByteRange> runs_a, runs_b;
  if (!Runs(a, max_runs, &runs_a) || !Runs(b, max_runs, &runs_b))
    return Overlap::kUnknown;
  const std::vector<ByteRange> ua = Union(runs_a), ub = Union(runs_b);
  size_t i = 0, j = 0;
  while (i < ua.size() && j < ub.size()) {
    if (ua[i].end <= ub[j].begin) {
      ++i;
    } else if (ub[j].end <= ua[i].begin) {
      ++j;
    } else {
      return Overlap::kSome;
    }
  }
  return Overlap::kNone;
}

}  // namespace ckptdb::planner
