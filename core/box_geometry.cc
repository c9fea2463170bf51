#include "core/box_geometry.h"

#include <algorithm>

namespace ckptdb::planner {

std::string BoxToString(const Box& box) {
  return "{offset " + ShapeToString(box.origin) + ", shape " +
         ShapeToString(box.shape) + "}";
}

bool Meet(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.ndim(); ++d) {
    if (std::min(a.exclusive_max(d), b.exclusive_max(d)) <=
        std::max(a.origin[d], b.origin[d]))
      return false;
  }
  return true;
}

// Boxes that miss each other allocate nothing: a planner asks far more often
// than boxes meet.
std::optional<Box> Intersect(const Box& a, const Box& b) {
  if (!Meet(a, b)) return std::nullopt;
  Box out;
  out.origin.resize(a.ndim());
  out.shape.resize(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) {
    const int64_t begin = std::max(a.origin[d], b.origin[d]);
    out.origin[d] = begin;
    out.shape[d] = std::min(a.exclusive_max(d), b.exclusive_max(d)) - begin;
  }
  return out;
}

std::vector<const Box*> ChunkBoxes(const std::vector<ChunkMetadata>& chunks) {
  std::vector<const Box*> boxes(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) boxes[i] = &chunks[i].box;
  return boxes;
}

bool Contains(const Box& outer, const Box& inner) {
  for (size_t d = 0; d < outer.ndim(); ++d) {
    if (inner.origin[d] < outer.origin[d] ||
        inner.exclusive_max(d) > outer.exclusive_max(d)) {
      return false;
    }
  }
  return true;
}

namespace {

// Where SplitBox cuts: dimensions before `cut` into single indices, `cut` into
// runs of `step` indices.
struct Cut {
  size_t cut;
  int64_t step;
};

Cut FindCut(const Box& box, size_t elem_size, size_t max_bytes) {
  const size_t ndim = box.ndim();
  // The outermost dimension `cut` such that one index of it (with every inner
  // dimension whole) fits.
  size_t cut = ndim - 1;
  size_t inner_bytes = elem_size;  // bytes of one index of `cut`
  for (size_t d = ndim; d-- > 0;) {
    size_t below = elem_size;
    for (size_t e = d + 1; e < ndim; ++e)
      below *= static_cast<size_t>(box.shape[e]);
    if (below <= max_bytes) {
      cut = d;
      inner_bytes = below;
    } else {
      break;
    }
  }
  return {cut,
          std::max<int64_t>(1, static_cast<int64_t>(max_bytes / inner_bytes))};
}

bool Fits(const Box& box, size_t elem_size, size_t max_bytes) {
  return box.ndim() == 0 ||
         static_cast<size_t>(box.volume()) * elem_size <= max_bytes;
}

}  // namespace

std::vector<Box> SplitBox(const Box& box, size_t elem_size, size_t max_bytes) {
  std::vector<Box> pieces;
  SplitBox(box, elem_size, max_bytes, pieces);
  return pieces;
}

void SplitBox(const Box& box, size_t elem_size, size_t max_bytes,
              std::vector<Box>& pieces) {
  pieces.clear();
  if (Fits(box, elem_size, max_bytes)) {
    pieces.push_back(box);
    return;
  }
  const auto [cut, step] = FindCut(box, elem_size, max_bytes);
  Shape outer_index(cut, 0);  // index in dims [0, cut), relative to box.origin
  while (true) {
    for (int64_t begin = 0; begin < box.shape[cut]; begin += step) {
      Box piece = box;
      for (size_t d = 0; d < cut; ++d) {
        piece.origin[d] = box.origin[d] + outer_index[d];
        piece.shape[d] = 1;
      }
      piece.origin[cut] = box.origin[cut] + begin;
      piece.shape[cut] = std::min(step, box.shape[cut] - begin);
      pieces.push_back(std::move(piece));
    }
    // Advance the odometer over dims [0, cut).
    size_t d = cut;
    while (d > 0) {
      --d;
      if (++outer_index[d] < box.shape[d]) break;
      outer_index[d] = 0;
      if (d == 0) return;
    }
    if (cut == 0) return;
  }
}

SplitSizes SplitBoxSizes(const Box& box, size_t elem_size, size_t max_bytes) {
  const uint64_t bytes = static_cast<uint64_t>(box.volume()) * elem_size;
  if (Fits(box, elem_size, max_bytes)) return {1, 1, bytes, bytes};
  const auto [cut, step] = FindCut(box, elem_size, max_bytes);
  uint64_t runs = 1, inner = elem_size;
  for (size_t d = 0; d < cut; ++d) runs *= static_cast<uint64_t>(box.shape[d]);
  for (size_t d = cut + 1; d < box.ndim(); ++d)
    inner *= static_cast<uint64_t>(box.shape[d]);
  const int64_t extent = box.shape[cut];
  const uint64_t per_run = static_cast<uint64_t>((extent + step - 1) / step);
  const int64_t last = extent - static_cast<int64_t>(per_run - 1) * step;
  return {runs, per_run, static_cast<uint64_t>(step) * inner,
          static_cast<uint64_t>(last) * inner};
}

std::optional<size_t> ContiguousRun(const Shape& shape, const Shape& offset,
                                    const Shape& lengths, size_t elem_size) {
  if (NumElements(lengths) == 0) return 0;
  size_t d = lengths.size();
  while (d > 0 && lengths[d - 1] == shape[d - 1]) --d;  // whole trailing dims
  for (size_t j = 0; j + 1 < d; ++j) {  // before the partial one: length 1
    if (lengths[j] != 1) return std::nullopt;
  }
  size_t at = 0, stride = elem_size;
  for (size_t j = shape.size(); j-- > 0;) {
    at += static_cast<size_t>(offset[j]) * stride;
    stride *= static_cast<size_t>(shape[j]);
  }
  return at;
}

}  // namespace ckptdb::planner
