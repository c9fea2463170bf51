#include "planner/flat_range.h"

namespace ckptdb::planner {
namespace {

// Appends the boxes of [begin, end) of the sub-array of dimensions [dim, ndim)
// whose leading coordinates are `prefix` (one per dimension before `dim`).
class Decomposer {
 public:
  Decomposer(const Shape& shape, std::vector<Box>& out)
      : shape_(shape), out_(out) {}

  void Range(Shape& prefix, int64_t begin, int64_t end) {
    if (begin == end) return;
    const size_t dim = prefix.size();
    if (dim == shape_.size()) {  // one element
      Add(prefix, 0, 0);
      return;
    }
    const int64_t inner = InnerSize(dim);
    const int64_t first_row = begin / inner, head = begin % inner;
    const int64_t last_row = end / inner, tail = end % inner;
    if (first_row == last_row) {  // within one row of `dim`
      Row(prefix, first_row, head, tail);
      return;
    }
    int64_t middle_begin = first_row;
    if (head != 0) {
      Row(prefix, first_row, head, inner);
      ++middle_begin;
    }
    if (last_row > middle_begin) Add(prefix, middle_begin, last_row);
    if (tail != 0) Row(prefix, last_row, 0, tail);
  }

 private:
  // Elements in one index of dimension `dim` (the product of the later
  // extents).
  int64_t InnerSize(size_t dim) const {
    int64_t n = 1;
    for (size_t d = dim + 1; d < shape_.size(); ++d) n *= shape_[d];
    return n;
  }

  // [begin, end) of row `row` of the current dimension.
  void Row(Shape& prefix, int64_t row, int64_t begin, int64_t end) {
    prefix.push_back(row);
    Range(prefix, begin, end);
    prefix.pop_back();
  }

  // The box of rows [first, last) of dimension prefix.size() (whole later
  // dimensions) under `prefix`; for a complete prefix, its one element.
  void Add(const Shape& prefix, int64_t first, int64_t last) {
    Box box;
    box.origin = prefix;
    box.shape.assign(prefix.size(), 1);
    if (prefix.size() < shape_.size()) {
      box.origin.push_back(first);
      box.shape.push_back(last - first);
      for (size_t d = prefix.size() + 1; d < shape_.size(); ++d) {
        box.origin.push_back(0);
        box.shape.push_back(shape_[d]);
      }
    }
    out_.push_back(std::move(box));
  }

  const Shape& shape_;
  std::vector<Box>& out_;
};

}  // namespace

std::vector<Box> FlatRangeBoxes(const Shape& shape, int64_t begin,
                                int64_t end) {
  CKPTDB_REQUIRE(0 <= begin && begin <= end && end <= NumElements(shape));
  std::vector<Box> boxes;
  if (begin == end) {
    if (!shape.empty()) {
      boxes.push_back({Shape(shape.size(), 0), shape});
      boxes.back().shape[0] = 0;
    }
    return boxes;
  }
  Shape prefix;
  Decomposer(shape, boxes).Range(prefix, begin, end);
  return boxes;
}

int64_t FlatIndex(const Shape& shape, const Shape& coord) {
  CKPTDB_REQUIRE(coord.size() == shape.size());
  int64_t index = 0;
  for (size_t d = 0; d < shape.size(); ++d) index = index * shape[d] + coord[d];
  return index;
}

}  // namespace ckptdb::planner
