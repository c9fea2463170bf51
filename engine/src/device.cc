#include "engine/src/device.h"

#include <atomic>

namespace ckptdb::engine {

// Defined by device_cuda.cc in CUDA builds, by device_none.cc otherwise.
DeviceCopier* BuildDeviceCopier();

namespace {
std::atomic<DeviceCopier*> test_copier{nullptr};
}  // namespace

DeviceCopier* CurrentDeviceCopier() {
  if (DeviceCopier* c = test_copier.load()) return c;
  static DeviceCopier* const built = BuildDeviceCopier();
  return built;
}

void SetDeviceCopierForTesting(DeviceCopier* copier) { test_copier = copier; }

bool IsTestDeviceCopier() { return test_copier.load() != nullptr; }

std::vector<Copy2D> BoxAsCopies2D(const Shape& shape, const Shape& offset,
                                  const Shape& lengths, size_t elem) {
  const size_t n = lengths.size();
  if (n == 0) return {{0, elem, elem, 1}};
  size_t k = n - 1;
  while (k > 0 && lengths[k] == shape[k]) --k;
  std::vector<size_t> stride(n);  // bytes per step of each dimension
  stride[n - 1] = elem;
  for (size_t d = n - 1; d-- > 0;)
    stride[d] = stride[d + 1] * static_cast<size_t>(shape[d + 1]);
  const size_t width = static_cast<size_t>(lengths[k]) * stride[k];
  const size_t rows = k > 0 ? static_cast<size_t>(lengths[k - 1]) : 1;
  const size_t pitch = k > 0 ? stride[k - 1] : width;
  const size_t outer = k > 0 ? k - 1 : 0;  // iterated dimensions
  std::vector<Copy2D> copies;
  std::vector<int64_t> at(outer, 0);
  while (true) {
    size_t start = 0;
    for (size_t d = 0; d < n; ++d) {
      start +=
          static_cast<size_t>(offset[d] + (d < outer ? at[d] : 0)) * stride[d];
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
  ASSIGN_OR_RETURN(data_, copier_->AllocDevice(device_, n));
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
                StagingBuffer* staging) {
  const MutableStridedBox dst{target.data, target.local_shape, dest_offset};
  if (target.device.type == DeviceType::kCPU) {
    CopyBox(src, src_dtype, dst, target.dtype, lengths);
    return Status::OK();
  }
  DeviceCopier* copier = CurrentDeviceCopier();
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
