#pragma once

// A stand-in for a GPU: "device" memory is host memory, and every copy goes
// through the same 2-D copy decomposition the CUDA copier uses. Installed, it
// lets the device branches of save and load run on machines without a GPU.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "engine/src/device.h"

namespace ckptdb::testing {

class HostAsDevice : public engine::DeviceCopier {
 public:
  HostAsDevice() { engine::SetDeviceCopierForTesting(this); }
  ~HostAsDevice() override { engine::SetDeviceCopierForTesting(nullptr); }

  void* AllocHost(size_t n) override { return std::malloc(n == 0 ? 1 : n); }
  void FreeHost(void* p) override { std::free(p); }

  Status StartToHost(const Device& device, const void* src, void* dst, size_t n,
                     int slot) override {
    if (device.type != DeviceType::kCUDA || slot < 0 || slot > 1)
      return Status::Internal("bad device copy");
    std::memcpy(dst, src, n);
    to_host_bytes += n;
    return Status::OK();
  }
  Status Wait(const Device&, int) override { return Status::OK(); }

  Status BoxToDevice(const Device& device, const void* src,
                     engine::MutableStridedBox dst, size_t elem_size,
                     const Shape& lengths) override {
    if (device.type != DeviceType::kCUDA)
      return Status::Internal("bad device copy");
    const char* from = static_cast<const char*>(src);
    for (const engine::Copy2D& c :
         engine::BoxAsCopies2D(dst.shape, dst.offset, lengths, elem_size)) {
      for (size_t r = 0; r < c.rows; ++r) {
        std::memcpy(static_cast<char*>(dst.data) + c.offset + r * c.pitch, from,
                    c.width);
        from += c.width;
      }
      ++copies_2d;
    }
    to_device_bytes +=
        static_cast<uint64_t>(from - static_cast<const char*>(src));
    return Status::OK();
  }

  std::atomic<uint64_t> to_host_bytes{0}, to_device_bytes{0}, copies_2d{0};
};

}  // namespace ckptdb::testing
