#include "engine/copy/box_views.h"

#include "planner/flat_range.h"

namespace ckptdb::engine {

std::vector<TensorView> BoxViews(const TensorView& view) {
  if (!view.is_flat_range()) return {view};
  CKPTDB_ASSERT(view.local_shape.size() == 1);
  const int64_t begin = *view.flat_offset;
  const int64_t step = view.strides.empty() ? 1 : view.strides[0];
  std::vector<TensorView> pieces;
  for (planner::Box& box : planner::FlatRangeBoxes(
           view.global_shape, begin, begin + view.local_shape[0])) {
    const int64_t at =
        planner::FlatIndex(view.global_shape, box.origin) - begin;
    TensorView piece = TensorView::Shard(
        static_cast<char*>(view.data) +
            static_cast<size_t>(at * step) * DTypeSize(view.dtype),
        view.dtype, std::move(box.shape), view.global_shape,
        std::move(box.origin), view.device);
    if (step != 1) {
      piece.strides = RowMajorStrides(piece.local_shape);
      for (int64_t& s : piece.strides) s *= step;
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

}  // namespace ckptdb::engine
