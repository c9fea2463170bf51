#include "engine/device/device.h"

namespace ckptdb::engine {

// Defined by device_cuda.cc in CUDA builds, by device_none.cc otherwise.
DeviceCopier* BuildDeviceCopier();

DeviceCopier* BuiltDeviceCopier() {
  static DeviceCopier* const built = BuildDeviceCopier();
  return built;
}

std::vector<Copy2D> BoxAsCopies2D(const Shape& shape, const Shape& offset,
                                  const Shape& lengths, size_t elem,
                                  std::span<const int64_t> strides) {
  const std::vector<size_t> stride = ElementStrides(shape, strides);
  // The packed side never breaks a run: its strides are those of `lengths`.
  const BoxRun r = InnermostRun(lengths, stride, ElementStrides(lengths, {}));
  const size_t width = r.run * elem;
  const size_t rows =
      r.inner > 0 ? static_cast<size_t>(lengths[r.inner - 1]) : 1;
  const size_t pitch = r.inner > 0 ? stride[r.inner - 1] * elem : width;
  const size_t outer = r.inner > 0 ? r.inner - 1 : 0;  // iterated dimensions
  std::vector<Copy2D> copies;
  std::vector<int64_t> at(outer, 0);
  while (true) {
    size_t start = 0;
    for (size_t d = 0; d < lengths.size(); ++d) {
      start += static_cast<size_t>(offset[d] + (d < outer ? at[d] : 0)) *
               stride[d] * elem;
    }
    copies.push_back({start, pitch, width, rows});
    size_t d = outer;
    while (d > 0 && ++at[d - 1] == lengths[d - 1]) at[--d] = 0;
    if (d == 0) break;
  }
  return copies;
}

Status DeviceBuffer::Reserve(size_t n) {
  if (n <= size_) return Status::OK();
  if (data_ != nullptr) copier_->FreeDevice(device_, data_);
  data_ = nullptr;
  size_ = 0;
  CKPTDB_ASSIGN_OR_RETURN(data_, copier_->AllocDevice(device_, n));
  size_ = n;
  return Status::OK();
}

StagingBuffer StagingPool::Take() {
  std::lock_guard lock(mu_);
  if (free_.empty()) return StagingBuffer();
  StagingBuffer b = std::move(free_.back());
  free_.pop_back();
  return b;
}

void StagingPool::Give(StagingBuffer buffer) {
  std::lock_guard lock(mu_);
  free_.push_back(std::move(buffer));
}

Status PlaceBox(StridedBox src, DType src_dtype, const TensorView& target,
                const Shape& dest_offset, const Shape& lengths,
                DeviceCopier* copier, StagingBuffer* staging) {
  const MutableStridedBox dst{target.data, target.local_shape, dest_offset,
                              target.strides};
  if (target.device.type == DeviceType::kCPU) {
    CopyBox(src, src_dtype, dst, target.dtype, lengths);
    return Status::OK();
  }
  if (copier == nullptr)
    return Status::InvalidArgument("no device copier for a device target");
  const size_t elem = DTypeSize(target.dtype);
  const size_t n = static_cast<size_t>(NumElements(lengths)) * elem;
  if (n == 0) return Status::OK();
  staging->Reserve(copier, n);
  const Shape zero(lengths.size(), 0);
  CopyBox(src, src_dtype, {staging->data(), lengths, zero}, target.dtype,
          lengths);
  return copier->BoxToDevice(target.device, staging->data(), dst, elem,
                             lengths);
}

}  // namespace ckptdb::engine
