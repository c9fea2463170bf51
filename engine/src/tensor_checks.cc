#include "engine/src/tensor_checks.h"

#include "engine/src/device.h"
#include "planner/partition.h"

namespace ckptdb::engine {

Status CheckView(const std::string& flat_key, const TensorView& view) {
  const std::string what = "tensor '" + flat_key + "'";
  if (!IsValidDType(static_cast<uint8_t>(view.dtype))) {
    return Status::InvalidArgument(
        what + ": unknown dtype code " +
        std::to_string(static_cast<int>(view.dtype)));
  }
  const planner::PartitionError inside = planner::CheckBoxInside(
      view.global_shape, {view.global_offset, view.local_shape});
  if (inside == planner::PartitionError::kWrongRank) {
    return Status::InvalidArgument(
        what + ": local shape " + ShapeToString(view.local_shape) +
        ", global shape " + ShapeToString(view.global_shape) +
        " and global offset " + ShapeToString(view.global_offset) +
        " must have the same number of dimensions");
  }
  if (inside != planner::PartitionError::kNone) {
    return Status::InvalidArgument(
        what + ": shard of shape " + ShapeToString(view.local_shape) +
        " at offset " + ShapeToString(view.global_offset) +
        " lies outside the global shape " + ShapeToString(view.global_shape));
  }
  // Element counts must fit comfortably in 64 bits (2^62 bytes).
  uint64_t bytes = DTypeSize(view.dtype);
  for (int64_t d : view.global_shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) ||
        bytes > (uint64_t{1} << 62)) {
      return Status::InvalidArgument(what + ": global shape " +
                                     ShapeToString(view.global_shape) +
                                     " is too large");
    }
  }
  if (view.device.type != DeviceType::kCPU) {
    if (view.device.type != DeviceType::kCUDA || view.device.index < 0) {
      return Status::InvalidArgument(what + ": unknown device");
    }
    DeviceCopier* copier = CurrentDeviceCopier();
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
      return Status::InvalidArgument(what +
                                     ": a CUDA tensor, but CUDA device " +
                                     std::to_string(view.device.index) +
                                     " cannot be used: " + ready.message());
    }
  }
  if (view.data == nullptr && view.nbytes() > 0) {
    return Status::InvalidArgument(what + ": data pointer is null");
  }
  return Status::OK();
}

}  // namespace ckptdb::engine
