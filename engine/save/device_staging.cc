#include "engine/save/device_staging.h"

namespace ckptdb::engine {

DeviceChunks::~DeviceChunks() {
  for (int slot = 0; slot < 2; ++slot) {
    if (pending_[slot] != nullptr) (void)copier_->Wait(*pending_[slot], slot);
  }
}

Result<const char*> DeviceChunks::HostBytes(size_t i, size_t end) {
  const MyChunk& m = mine_[order_[i]];
  if (m.device == nullptr) return HostChunk(m);
  if (started_ != i) CKPTDB_RETURN_IF_ERROR(Start(i));  // the part's first
  const int slot = static_cast<int>(i % 2);
  CKPTDB_RETURN_IF_ERROR(copier_->Wait(*m.device, slot));
  pending_[slot] = nullptr;
  // Start the next device chunk of the part, into the other buffer.
  for (size_t j = i + 1; j < end; ++j) {
    if (mine_[order_[j]].device == nullptr) continue;
    if (j % 2 != i % 2) CKPTDB_RETURN_IF_ERROR(Start(j));
    break;
  }
  return staging_[slot].data();
}

const char* DeviceChunks::HostChunk(const MyChunk& m) {
  if (m.strided == nullptr) return static_cast<const char*>(m.data);
  const TensorView& v = *m.strided;
  packed_.resize(m.nbytes);
  const Shape zero(m.in_view.shape.size(), 0);
  CopyBox({v.data, v.local_shape, m.in_view.origin, v.strides}, v.dtype,
          {packed_.data(), m.in_view.shape, zero}, v.dtype, m.in_view.shape);
  return packed_.data();
}

Status DeviceChunks::Start(size_t i) {
  const MyChunk& m = mine_[order_[i]];
  if (copier_ == nullptr)
    return Status::InvalidArgument("no device copier for a device tensor");
  const int slot = static_cast<int>(i % 2);
  staging_[slot].Reserve(copier_, m.nbytes);
  if (m.strided != nullptr) {
    const TensorView& v = *m.strided;
    CKPTDB_RETURN_IF_ERROR(copier_->StartBoxToHost(
        *m.device, {v.data, v.local_shape, m.in_view.origin, v.strides},
        staging_[slot].data(), DTypeSize(v.dtype), m.in_view.shape, slot));
  } else {
    CKPTDB_RETURN_IF_ERROR(copier_->StartToHost(
        *m.device, m.data, staging_[slot].data(), m.nbytes, slot));
  }
  pending_[slot] = m.device;
  started_ = i;
  return Status::OK();
}

}  // namespace ckptdb::engine
