#include "tools/dump_checks.h"

#include <algorithm>

namespace ckptdb::tools {

std::vector<std::string> LayoutProblems(const std::string& key,
                                        const TensorMetadata& t) {
  std::vector<std::string> problems;
  const std::string name = "tensor '" + key + "'";
  int64_t volume = 0;
  for (const ChunkMetadata& c : t.chunks) {
    bool inside = c.global_offset.size() == t.global_shape.size() &&
                  c.local_shape.size() == t.global_shape.size();
    for (size_t d = 0; inside && d < t.global_shape.size(); ++d) {
      inside = c.global_offset[d] >= 0 && c.local_shape[d] >= 0 &&
               c.global_offset[d] + c.local_shape[d] <= t.global_shape[d];
    }
    if (!inside) {
      problems.push_back(name + ": chunk at offset " +
                         ShapeToString(c.global_offset) + " shape " +
                         ShapeToString(c.local_shape) + " lies outside " +
                         ShapeToString(t.global_shape));
      continue;
    }
    const uint64_t expected =
        static_cast<uint64_t>(NumElements(c.local_shape)) * DTypeSize(t.dtype);
    if (c.nbytes != expected) {
      problems.push_back(name + ": chunk at offset " +
                         ShapeToString(c.global_offset) + " records " +
                         std::to_string(c.nbytes) + " bytes, its box holds " +
                         std::to_string(expected));
    }
    volume += NumElements(c.local_shape);
  }
  if (!problems.empty()) return problems;
  // Overlaps: chunks sorted by their first offset, each compared with those
  // that start before it ends along dimension 0.
  std::vector<const ChunkMetadata*> sorted;
  for (const ChunkMetadata& c : t.chunks) {
    if (NumElements(c.local_shape) > 0) sorted.push_back(&c);
  }
  if (!t.global_shape.empty()) {
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) {
      return a->global_offset < b->global_offset;
    });
  }
  for (size_t i = 0; i < sorted.size(); ++i) {
    for (size_t j = i + 1; j < sorted.size(); ++j) {
      const ChunkMetadata& a = *sorted[i];
      const ChunkMetadata& b = *sorted[j];
      if (!t.global_shape.empty() &&
          b.global_offset[0] >= a.global_offset[0] + a.local_shape[0])
        break;
      bool overlap = true;
      for (size_t d = 0; overlap && d < t.global_shape.size(); ++d) {
        overlap = std::max(a.global_offset[d], b.global_offset[d]) <
                  std::min(a.global_offset[d] + a.local_shape[d],
                           b.global_offset[d] + b.local_shape[d]);
      }
      if (overlap) {
        problems.push_back(name + ": chunks at offsets " +
                           ShapeToString(a.global_offset) + " and " +
                           ShapeToString(b.global_offset) + " overlap");
      }
    }
  }
  if (problems.empty() && volume != NumElements(t.global_shape)) {
    problems.push_back(name + ": chunks cover " + std::to_string(volume) +
                       " of " + std::to_string(NumElements(t.global_shape)) +
                       " elements (a gap)");
  }
  return problems;
}

}  // namespace ckptdb::tools
