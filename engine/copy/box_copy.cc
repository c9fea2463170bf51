#include "engine/copy/box_copy.h"

#include <algorithm>
#include <cstring>

#include "engine/copy/dtype_convert.h"

namespace ckptdb::engine {

std::vector<size_t> ElementStrides(const Shape& shape,
                                   std::span<const int64_t> strides) {
  std::vector<size_t> out(shape.size(), 1);
  if (!strides.empty()) {
    CKPTDB_ASSERT(strides.size() == shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      CKPTDB_ASSERT(strides[d] >= 0);
      out[d] = static_cast<size_t>(strides[d]);
    }
    return out;
  }
  for (size_t d = shape.size(); d-- > 1;)
    out[d - 1] = out[d] * static_cast<size_t>(shape[d]);
  return out;
}

BoxRun InnermostRun(const Shape& lengths, const std::vector<size_t>& a,
                    const std::vector<size_t>& b) {
  BoxRun r{lengths.size(), 1};
  while (r.inner > 0) {
    const size_t d = r.inner - 1;
    if (lengths[d] != 1 && (a[d] != r.run || b[d] != r.run)) break;
    r.run *= static_cast<size_t>(lengths[d]);
    r.inner = d;
  }
  return r;
}

namespace {

// `count` single elements of `T`, `s_step` and `t_step` bytes apart.
template <typename T>
void CopyElements(const uint8_t* s, size_t s_step, uint8_t* t, size_t t_step,
                  size_t count) {
  for (size_t k = 0; k < count; ++k) {
    T v;
    std::memcpy(&v, s + k * s_step, sizeof(T));
    std::memcpy(t + k * t_step, &v, sizeof(T));
  }
}

// One line of a box: `count` runs of `run` contiguous elements, the runs
// `s_step` / `t_step` bytes apart in the source / target.
struct Line {
  size_t count, run, s_step, t_step;
};

void CopyLine(const uint8_t* s, DType from, uint8_t* t, DType to,
              const Line& line) {
  const size_t elem = DTypeSize(from);
  if (from != to) {
    for (size_t k = 0; k < line.count; ++k) {
      ConvertElements(s + k * line.s_step, from, t + k * line.t_step, to,
                      line.run);
    }
    return;
  }
  if (line.run == 1) {
    switch (elem) {
      case 1:
        return CopyElements<uint8_t>(s, line.s_step, t, line.t_step,
                                     line.count);
      case 2:
        return CopyElements<uint16_t>(s, line.s_step, t, line.t_step,
                                      line.count);
      case 4:
        return CopyElements<uint32_t>(s, line.s_step, t, line.t_step,
                                      line.count);
      case 8:
        return CopyElements<uint64_t>(s, line.s_step, t, line.t_step,
                                      line.count);
    }
  }
  for (size_t k = 0; k < line.count; ++k) {
    std::memcpy(t + k * line.t_step, s + k * line.s_step, line.run * elem);
  }
}

// `rows` lines, `s_row` / `t_row` bytes apart in the source / target.
struct Plane {
  size_t rows, s_row, t_row;
};

// The lines of a plane in tiles of kTile x kTile runs, so that both sides stay
// in cache when one of them is strided across the lines (a transpose).
void CopyPlane(const uint8_t* s, DType from, uint8_t* t, DType to,
               const Plane& plane, const Line& line) {
  constexpr size_t kTile = 64;
  for (size_t i0 = 0; i0 < plane.rows; i0 += kTile) {
    const size_t i1 = std::min(plane.rows, i0 + kTile);
    for (size_t j0 = 0; j0 < line.count; j0 += kTile) {
      Line part = line;
      part.count = std::min(line.count - j0, kTile);
      for (size_t i = i0; i < i1; ++i) {
        CopyLine(s + i * plane.s_row + j0 * line.s_step, from,
                 t + i * plane.t_row + j0 * line.t_step, to, part);
      }
    }
  }
}

}  // namespace

void CopyBox(StridedBox src, DType src_dtype, MutableStridedBox dst,
             DType dst_dtype, const Shape& lengths) {
  if (NumElements(lengths) == 0) return;
  const size_t src_elem = DTypeSize(src_dtype), dst_elem = DTypeSize(dst_dtype);
  const std::vector<size_t> src_stride =
      ElementStrides(src.buffer_shape, src.strides);
  const std::vector<size_t> dst_stride =
      ElementStrides(dst.buffer_shape, dst.strides);
  const BoxRun r = InnermostRun(lengths, src_stride, dst_stride);
  size_t src_base = 0, dst_base = 0;
  for (size_t d = 0; d < lengths.size(); ++d) {
    src_base += static_cast<size_t>(src.origin[d]) * src_stride[d];
    dst_base += static_cast<size_t>(dst.origin[d]) * dst_stride[d];
  }
  // Runs repeat along dimension `outer` (a line). Single elements (a strided
  // innermost dimension, as in a transpose) go by tiled planes of the lines
  // along `outer - 1` too. The dimensions before are iterated.
  const size_t outer = r.inner == 0 ? 0 : r.inner - 1;
  const Line line = r.inner == 0 ? Line{1, r.run, 0, 0}
                                 : Line{static_cast<size_t>(lengths[outer]),
                                        r.run, src_stride[outer] * src_elem,
                                        dst_stride[outer] * dst_elem};
  const bool tiled = r.run == 1 && outer >= 1;
  const size_t iterated = tiled ? outer - 1 : outer;
  const Plane plane = tiled ? Plane{static_cast<size_t>(lengths[outer - 1]),
                                    src_stride[outer - 1] * src_elem,
                                    dst_stride[outer - 1] * dst_elem}
                            : Plane{1, 0, 0};
  const auto* s = static_cast<const uint8_t*>(src.data);
  auto* t = static_cast<uint8_t*>(dst.data);
  std::vector<int64_t> index(iterated, 0);  // odometer over [0, iterated)
  while (true) {
    size_t si = src_base, di = dst_base;
    for (size_t d = 0; d < iterated; ++d) {
      si += static_cast<size_t>(index[d]) * src_stride[d];
      di += static_cast<size_t>(index[d]) * dst_stride[d];
    }
    CopyPlane(s + si * src_elem, src_dtype, t + di * dst_elem, dst_dtype, plane,
              line);
    size_t d = iterated;
    while (d > 0 && ++index[d - 1] == lengths[d - 1]) index[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace ckptdb::engine
