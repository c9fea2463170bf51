// The CUDA device copier: page-locked staging, per-thread streams, and 2-D
// copies for boxes of strided device arrays.
#include <cuda_runtime_api.h>

#include <array>
#include <new>

#include "engine/device/cuda_status.h"
#include "engine/device/device.h"

namespace ckptdb::engine {
namespace {

// Two streams per device for the calling thread (created on first use).
cudaStream_t StreamFor(int device, int slot) {
  struct Streams {
    int device = -1;
    std::array<cudaStream_t, 2> s{};
    ~Streams() {
      for (cudaStream_t x : s) {
        if (x != nullptr) cudaStreamDestroy(x);
      }
    }
  };
  thread_local Streams streams;
  if (streams.device != device) {
    for (cudaStream_t& x : streams.s) {
      if (x != nullptr) cudaStreamDestroy(x);
      x = nullptr;
      cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking);
    }
    streams.device = device;
  }
  return streams.s[slot & 1];
}

class CudaCopier : public DeviceCopier {
 public:
  void* AllocHost(size_t n) override {
    void* p = nullptr;
    if (cudaHostAlloc(&p, n == 0 ? 1 : n, cudaHostAllocDefault) !=
        cudaSuccess) {
      throw std::bad_alloc();
    }
    return p;
  }
  void FreeHost(void* p) override { cudaFreeHost(p); }

  Status StartToHost(const Device& device, const void* src, void* dst, size_t n,
                     int slot) override {
    CKPTDB_RETURN_IF_ERROR(
        FromCuda(cudaSetDevice(device.index), "selecting device"));
    return FromCuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost,
                                    StreamFor(device.index, slot)),
                    "device-to-host copy");
  }

  Status StartBoxToHost(const Device& device, StridedBox src, void* dst,
                        size_t elem, const Shape& lengths, int slot) override {
    CKPTDB_RETURN_IF_ERROR(
        FromCuda(cudaSetDevice(device.index), "selecting device"));
    if (NumElements(lengths) == 0) return Status::OK();
    cudaStream_t stream = StreamFor(device.index, slot);
    const char* base = static_cast<const char*>(src.data);
    char* to = static_cast<char*>(dst);
    for (const Copy2D& c : BoxAsCopies2D(src.buffer_shape, src.origin, lengths,
                                         elem, src.strides)) {
      CKPTDB_RETURN_IF_ERROR(FromCuda(
          cudaMemcpy2DAsync(to, c.width, base + c.offset, c.pitch, c.width,
                            c.rows, cudaMemcpyDeviceToHost, stream),
          "strided device-to-host copy"));
      to += c.width * c.rows;
    }
    return Status::OK();
  }

  Status Wait(const Device& device, int slot) override {
    CKPTDB_RETURN_IF_ERROR(
        FromCuda(cudaSetDevice(device.index), "selecting device"));
    return FromCuda(cudaStreamSynchronize(StreamFor(device.index, slot)),
                    "waiting for a copy");
  }

  Status BoxToDevice(const Device& device, const void* src,
                     MutableStridedBox dst, size_t elem,
                     const Shape& lengths) override {
    return CopyBox(device, src, dst, elem, lengths, cudaMemcpyHostToDevice);
  }

  Status DeviceBoxToDevice(const Device& device, const void* src,
                           MutableStridedBox dst, size_t elem,
                           const Shape& lengths) override {
    return CopyBox(device, src, dst, elem, lengths, cudaMemcpyDeviceToDevice);
  }

  Result<void*> AllocDevice(const Device& device, size_t n) override {
    CKPTDB_RETURN_IF_ERROR(
        FromCuda(cudaSetDevice(device.index), "selecting device"));
    void* p = nullptr;
    CKPTDB_RETURN_IF_ERROR(
        FromCuda(cudaMalloc(&p, n == 0 ? 1 : n), "allocating transfer memory"));
    return p;
  }

  void FreeDevice(const Device& device, void* p) override {
    cudaSetDevice(device.index);
    cudaFree(p);
  }

  Status Synchronize(const Device& device) override {
    CKPTDB_RETURN_IF_ERROR(
        FromCuda(cudaSetDevice(device.index), "selecting device"));
    return FromCuda(cudaDeviceSynchronize(), "waiting for the device");
  }

  Result<Device> DefaultDevice() override {
    int index = 0;
    CKPTDB_RETURN_IF_ERROR(
        FromCuda(cudaGetDevice(&index), "finding the device"));
    return Device{DeviceType::kCUDA, index};
  }

 private:
  // The 2-D copies of a box from packed `src` (host or device, per `kind`).
  static Status CopyBox(const Device& device, const void* src,
                        MutableStridedBox dst, size_t elem,
                        const Shape& lengths, cudaMemcpyKind kind) {
    CKPTDB_RETURN_IF_ERROR(
        FromCuda(cudaSetDevice(device.index), "selecting device"));
    cudaStream_t stream = StreamFor(device.index, 0);
    const char* from = static_cast<const char*>(src);
    char* base = static_cast<char*>(dst.data);
    cudaError_t queued = cudaSuccess;
    for (const Copy2D& c : BoxAsCopies2D(dst.buffer_shape, dst.origin, lengths,
                                         elem, dst.strides)) {
      queued = cudaMemcpy2DAsync(base + c.offset, c.pitch, from, c.width,
                                 c.width, c.rows, kind, stream);
      if (queued != cudaSuccess) break;
      from += c.width * c.rows;
    }
    // Copies already queued read `src`: they finish before it is reused, even
    // when a later one could not be queued.
    const cudaError_t done = cudaStreamSynchronize(stream);
    CKPTDB_RETURN_IF_ERROR(FromCuda(queued, "box copy to the device"));
    return FromCuda(done, "box copy to the device");
  }
};

}  // namespace

// Without a usable device (no GPU, no driver), device tensors are refused.
DeviceCopier* BuildDeviceCopier() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return nullptr;
  static CudaCopier copier;
  return &copier;
}

}  // namespace ckptdb::engine
