#include "engine/api/tensor_checks.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/error_name.h"
#include "core/memory_overlap.h"
#include "core/partition.h"
#include "engine/device/device.h"

namespace ckptdb::engine {

namespace {

// The contiguous runs of bytes an overlap test of load targets may list
// before it gives up (and refuses the targets): 4 Mi runs, 64 MiB.
constexpr size_t kMaxOverlapRuns = size_t{1} << 22;

planner::StridedMemory MemoryOf(const TensorView& view) {
  return {
      reinterpret_cast<uintptr_t>(view.data), DTypeSize(view.dtype),
      view.local_shape,
      view.strides.empty() ? RowMajorStrides(view.local_shape) : view.strides};
}

// Where a view's bytes lie: from its first to its last element's end. A
// dense view's are its bytes, found without listing its dimensions.
planner::ByteRange ExtentOf(const TensorView& view) {
  if (view.strides.empty()) {
    const auto begin = reinterpret_cast<uintptr_t>(view.data);
    return {begin, begin + view.nbytes()};
  }
  return planner::Extent(MemoryOf(view));
}

// Two targets that are the same array: tied weights (one tensor under two
// keys) receive the same bytes under each key.
bool SameArray(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.dtype == b.dtype && a.device == b.device &&
         a.local_shape == b.local_shape &&
         MemoryOf(a).strides == MemoryOf(b).strides;
}

// The largest tensor a save or load takes: 1 PiB.
constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 50;

// "[begin, end)", or, where the end does not fit in 64 bits, "of n elements
// from element begin".
std::string FlatRangeText(int64_t begin, int64_t n) {
  int64_t end = 0;
  char text[96];
  if (__builtin_add_overflow(begin, n, &end)) {
    std::snprintf(text, sizeof(text), "of %lld elements from element %lld",
                  static_cast<long long>(n), static_cast<long long>(begin));
  } else {
    std::snprintf(text, sizeof(text), "[%lld, %lld)",
                  static_cast<long long>(begin), static_cast<long long>(end));
  }
  return text;
}

// A flat range: 1-D, inside the flattened tensor.
Status CheckFlatRange(const ErrorName& what, const TensorView& view) {
  if (view.local_shape.size() != 1 || !view.global_offset.empty()) {
    return Status::InvalidArgument(
        what +
        ": a flat range must be 1-D with no global offset, got local "
        "shape " +
        ShapeToString(view.local_shape) + " and global offset " +
        ShapeToString(view.global_offset));
  }
  const int64_t begin = *view.flat_offset, n = view.local_shape[0];
  int64_t total = 1;
  for (int64_t d : view.global_shape) {
    if (d < 0 || __builtin_mul_overflow(total, d, &total)) {
      return Status::InvalidArgument(what + ": global shape " +
                                     ShapeToString(view.global_shape) +
                                     " is negative or too large");
    }
  }
  if (begin < 0 || n < 0 || begin > total || n > total - begin) {
    return Status::InvalidArgument(
        what + ": flat range " + FlatRangeText(begin, n) +
        " lies outside the " + std::to_string(total) +
        " elements of global shape " + ShapeToString(view.global_shape));
  }
  return Status::OK();
}

// Strides: one per dimension, non-negative; a device array's steps must not
// be 0 (2-D copies need a pitch of at least one element).
Status CheckStrides(const ErrorName& what, const TensorView& view) {
  if (view.strides.empty()) return Status::OK();
  if (view.strides.size() != view.local_shape.size()) {
    return Status::InvalidArgument(
        what + ": strides " + ShapeToString(view.strides) +
        " must have one entry per dimension of local shape " +
        ShapeToString(view.local_shape));
  }
  for (size_t d = 0; d < view.strides.size(); ++d) {
    if (view.strides[d] < 0) {
      return Status::InvalidArgument(
          what + ": negative strides " + ShapeToString(view.strides) +
          " (a reversed view) are not supported; pass a copy");
    }
    if (view.strides[d] == 0 && view.local_shape[d] > 1 &&
        view.device.type != DeviceType::kCPU) {
      return Status::InvalidArgument(what + ": strides " +
                                     ShapeToString(view.strides) +
                                     " of a device tensor must not be 0");
    }
  }
  // Each stride in bytes, and the end of the view's last element, within
  // what a 64-bit offset holds: past it, the offsets the copies compute wrap
  // around to memory outside the view. (An empty view addresses nothing.)
  for (int64_t extent : view.local_shape) {
    if (extent <= 0) return Status::OK();
  }
  constexpr __int128 kMaxOffset = std::numeric_limits<int64_t>::max();
  const __int128 element = static_cast<__int128>(DTypeSize(view.dtype));
  __int128 end = element;
  for (size_t d = 0; d < view.strides.size() && end <= kMaxOffset; ++d) {
    const __int128 step = view.strides[d] * element;
    end = step > kMaxOffset ? step : end + (view.local_shape[d] - 1) * step;
  }
  if (end > kMaxOffset) {
    return Status::InvalidArgument(
        what + ": strides " + ShapeToString(view.strides) + " of local shape " +
        ShapeToString(view.local_shape) +
        " place elements beyond the byte offsets a 64-bit integer holds");
  }
  return Status::OK();
}

Status CheckBox(const ErrorName& what, const TensorView& view) {
  if (view.is_flat_range()) return CheckFlatRange(what, view);
  const planner::PartitionError inside = planner::CheckBoxInside(
      view.global_shape, view.global_offset, view.local_shape);
  if (inside == planner::PartitionError::kWrongRank) {
    return Status::InvalidArgument(
        what + ": local shape " + ShapeToString(view.local_shape) +
        ", global shape " + ShapeToString(view.global_shape) +
        " and global offset " + ShapeToString(view.global_offset) +
        " must have the same number of dimensions");
  }
  auto negative = [](const Shape& s) {
    return std::any_of(s.begin(), s.end(), [](int64_t x) { return x < 0; });
  };
  if (negative(view.local_shape) || negative(view.global_shape) ||
      negative(view.global_offset)) {
    return Status::InvalidArgument(
        what + ": local shape " + ShapeToString(view.local_shape) +
        ", global shape " + ShapeToString(view.global_shape) +
        " and global offset " + ShapeToString(view.global_offset) +
        " must not be negative");
  }
  if (inside != planner::PartitionError::kNone) {
    return Status::InvalidArgument(
        what + ": shard of shape " + ShapeToString(view.local_shape) +
        " at offset " + ShapeToString(view.global_offset) +
        " lies outside the global shape " + ShapeToString(view.global_shape));
  }
  return Status::OK();
}

// A global shape that a checkpoint's records can hold: at most
// kMaxTensorDims dimensions of at most kMaxTensorExtent each (a tensor of
// extent 0 in one dimension holds no bytes however large the others are).
Status CheckRecordable(const ErrorName& what, const TensorView& view) {
  const Shape& shape = view.global_shape;
  if (shape.size() > kMaxTensorDims) {
    return Status::InvalidArgument(
        what + ": global shape " + ShapeToString(shape) + " has " +
        std::to_string(shape.size()) + " dimensions; a checkpoint holds " +
        "tensors of at most " + std::to_string(kMaxTensorDims) +
        " (reshape it, e.g. flatten the leading dimensions)");
  }
  for (int64_t d : shape) {
    if (d > kMaxTensorExtent) {
      return Status::InvalidArgument(
          what + ": global shape " + ShapeToString(shape) +
          " is too large: an extent above 2^48, the most a checkpoint "
          "holds");
    }
  }
  return Status::OK();
}

// A device view's device is known and usable through `copier`, and the work
// queued on it has finished.
Status CheckDevice(const ErrorName& what, const TensorView& view,
                   DeviceCopier* copier) {
  if (view.device.type == DeviceType::kCPU) return Status::OK();
  if (view.device.type != DeviceType::kCUDA || view.device.index < 0) {
    return Status::InvalidArgument(what + ": unknown device");
  }
  if (copier == nullptr) {
#ifdef CKPTDB_WITH_CUDA
    return Status::InvalidArgument(
        what + ": a CUDA tensor, but no CUDA device is available");
#else
    return Status::InvalidArgument(
        what + ": device tensors need a build with CUDA support");
#endif
  }
  const Status ready = copier->Synchronize(view.device);
  if (!ready.ok()) {
    return Status::InvalidArgument(what + ": a CUDA tensor, but CUDA device " +
                                   std::to_string(view.device.index) +
                                   " cannot be used: " + ready.message());
  }
  return Status::OK();
}

}  // namespace

Status CheckView(const std::string& flat_key, const TensorView& view,
                 DeviceCopier* copier) {
  const ErrorName what = TensorName(flat_key);  // joined only for an error
  if (!IsValidDType(static_cast<uint8_t>(view.dtype))) {
    return Status::InvalidArgument(
        what + ": unknown dtype code " +
        std::to_string(static_cast<int>(view.dtype)));
  }
  CKPTDB_RETURN_IF_ERROR(CheckRecordable(what, view));
  CKPTDB_RETURN_IF_ERROR(CheckBox(what, view));
  CKPTDB_RETURN_IF_ERROR(CheckStrides(what, view));
  // At most kMaxTensorBytes: a larger tensor is no model's (a broadcast view
  // of a few bytes may claim 2^60 elements) and would be read for hours.
  uint64_t bytes = DTypeSize(view.dtype);
  for (int64_t d : view.global_shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) ||
        bytes > kMaxTensorBytes) {
      return Status::InvalidArgument(
          what + ": global shape " + ShapeToString(view.global_shape) +
          " is too large (more than " + std::to_string(kMaxTensorBytes >> 40) +
          " TiB)");
    }
  }
  CKPTDB_RETURN_IF_ERROR(CheckDevice(what, view, copier));
  if (view.data == nullptr && view.nbytes() > 0) {
    return Status::InvalidArgument(what + ": data pointer is null");
  }
  return Status::OK();
}

Status CheckTargetView(const std::string& flat_key, const TensorView& view,
                       DeviceCopier* copier) {
  CKPTDB_RETURN_IF_ERROR(CheckView(flat_key, view, copier));
  for (size_t d = 0; d < view.strides.size(); ++d) {
    if (view.strides[d] == 0 && view.local_shape[d] > 1) {
      return Status::InvalidArgument(
          "tensor '" + flat_key + "': a load target with strides " +
          ShapeToString(view.strides) +
          " (a stride of 0: a broadcast view) would receive several elements "
          "in one place");
    }
  }
  // A dense view (no strides) holds each element once.
  const planner::Overlap self =
      view.strides.empty()
          ? planner::Overlap::kNone
          : planner::SelfOverlap(MemoryOf(view), kMaxOverlapRuns);
  if (self != planner::Overlap::kNone) {
    return Status::InvalidArgument(
        "tensor '" + flat_key + "': a load target of shape " +
        ShapeToString(view.local_shape) + " with strides " +
        ShapeToString(view.strides) +
        (self == planner::Overlap::kSome
             ? " would receive several elements in one place"
             : " interleaves its elements too finely to check that none "
               "share memory"));
  }
  return Status::OK();
}

Status CheckTargetsApart(const std::vector<KeyedView>& targets,
                         std::vector<size_t>* tied_before) {
  tied_before->clear();
  std::vector<std::pair<planner::ByteRange, const KeyedView*>> extents;
  for (const KeyedView& t : targets) {
    const planner::ByteRange extent = ExtentOf(*t.view);
    if (!extent.empty()) extents.emplace_back(extent, &t);
  }
  std::sort(extents.begin(), extents.end(), [](const auto& a, const auto& b) {
    return a.first.begin < b.first.begin;
  });
  // Each target against those before it whose extent reaches into it.
  std::vector<size_t> open;
  for (size_t i = 0; i < extents.size(); ++i) {
    const auto& [extent, t] = extents[i];
    std::erase_if(
        open, [&](size_t j) { return extents[j].first.end <= extent.begin; });
    for (size_t j : open) {
      const KeyedView& other = *extents[j].second;
      if (other.view->device != t->view->device) continue;
      if (SameArray(*other.view, *t->view)) {
        tied_before->push_back(
            static_cast<size_t>(std::min(&other, t) - targets.data()));
        continue;
      }
      const planner::Overlap overlap = planner::MutualOverlap(
          MemoryOf(*other.view), MemoryOf(*t->view), kMaxOverlapRuns);
      if (overlap == planner::Overlap::kNone) continue;
      return Status::InvalidArgument(
          "load targets '" + std::string(other.flat_key) + "' and '" +
          std::string(t->flat_key) + "' " +
          (overlap == planner::Overlap::kSome
               ? "share memory: a load would write both into the same bytes "
                 "(only the same array under two keys may be loaded twice)"
               : "interleave in memory too finely to check that they share "
                 "no bytes"));
    }
    open.push_back(i);
  }
  std::sort(tied_before->begin(), tied_before->end());
  tied_before->erase(std::unique(tied_before->begin(), tied_before->end()),
                     tied_before->end());
  return Status::OK();
}

}  // namespace ckptdb::engine
